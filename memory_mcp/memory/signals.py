"""Spotting when the user corrects the agent or confirms it got something right.

The updater takes these as hints: a correction is worth a `correction` fact with `sourceError`;
a confirmation raises confidence in what was just done.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

RECENT_INPUTS_CHECKED = 6

_CORRECTION = re.compile(
    r"that[’']?s (?:wrong|not (?:right|correct|what i (?:meant|asked|wanted)))|you misunderstood|"
    r"you got (?:it|that) wrong|\bnot what i (?:meant|asked|wanted)\b|\btry again\b|\bincorrect\b|"
    r"不对|不是这样|你理解错了|理解错|错了|重新来|再试一次|不是我想要的",
    re.IGNORECASE,
)
_REINFORCEMENT = re.compile(
    r"\bexactly right\b|\bperfect\b|\bkeep doing (?:that|this)\b|\bthat[’']?s (?:exactly )?right\b|"
    r"\bspot on\b|\bwell done\b|完全正确|就是这个意思|正是我想要的|太好了|非常好|没错",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Signals:
    correction: bool = False
    reinforcement: bool = False

    def __or__(self, other: Signals) -> Signals:
        return Signals(self.correction or other.correction, self.reinforcement or other.reinforcement)


def detect_signals(user_inputs: Iterable[str]) -> Signals:
    """Look at the most recent user inputs (oldest first in `user_inputs`) for either signal."""
    recent = list(user_inputs)[-RECENT_INPUTS_CHECKED:]
    return Signals(
        correction=any(_CORRECTION.search(text) for text in recent),
        reinforcement=any(_REINFORCEMENT.search(text) for text in recent),
    )
