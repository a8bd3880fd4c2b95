"""The instructions that turn a stretch of conversation into an update of structured memory."""

from __future__ import annotations

import json
from collections.abc import Sequence

from memory_mcp.facts import current
from memory_mcp.models import MemoryDocument, Page
from memory_mcp.signals import Signals

SYSTEM_PROMPT = """\
You maintain the long-term memory an AI assistant keeps about one user. You receive the memory as it
stands and a stretch of new conversation. Reply with a JSON object that updates the memory, and nothing else.

First reflect on the conversation:
- Did the user correct the assistant, reject an answer, or ask it to try again? Record what was wrong as a
  fact of category "correction", with "sourceError" holding the mistaken belief or action to avoid.
- Did the user confirm that something worked ("exactly right", "perfect")? Raise confidence in what it confirms.
- Did a lasting constraint of the user's work or life come up (a deadline, a tool they must use, a rule)?
  Record it as a fact.

Then update the sections. Write each summary in the user's own language, about the user, in the third person.
Set "shouldUpdate": true only for sections the conversation changes, and then give the whole new summary
(it replaces the old one, so keep what still holds).
- user.workContext: role, company, main projects, technologies (2-3 sentences).
- user.personalContext: languages, how they like to communicate, key interests (1-2 sentences).
- user.topOfMind: what occupies them now, several threads at once (3-5 sentences, the most often updated).
- history.recentMonths: what they did over the last one to three months, in detail (4-6 sentences).
- history.earlierContext: notable patterns from three to twelve months ago (3-5 sentences).
- history.longTermBackground: lasting background that rarely changes (2-4 sentences).

Facts are short, self-contained statements. Category is one of:
preference (tastes, styles, formats), knowledge (skills, expertise), context (circumstances of work or life),
behavior (how they work or communicate), goal (aims and priorities), correction (a mistake to avoid, with sourceError).
Confidence: 0.9-1.0 stated explicitly by the user; 0.7-0.89 strongly implied; below 0.7 a guess (it will be ignored).
Never repeat a fact already in memory. To change a fact, list its id in "factsToRemove" and add the new version.
Remove facts only when the conversation shows they no longer hold.

Also note what the assistant itself stated, decided or did that it should stay consistent with later
("assistantKnowledge"), such as a recommendation it made or a convention it adopted.

Finally describe the new conversation itself in "session": a one-sentence summary of its topic and up to
eight keywords, in the user's language.

Never record that files were uploaded or attached: uploads belong to one session and will not exist later.
Do not invent anything the conversation does not support.

Reply with exactly this JSON shape:
{"user": {"workContext": {"summary": "...", "shouldUpdate": false}, "personalContext": {...}, "topOfMind": {...}},
 "history": {"recentMonths": {...}, "earlierContext": {...}, "longTermBackground": {...}},
 "newFacts": [{"content": "...", "category": "preference", "confidence": 0.9}],
 "factsToRemove": ["fact_..."],
 "assistantKnowledge": [{"content": "...", "confidence": 0.9}],
 "session": {"summary": "...", "keywords": ["...", "..."]}}"""


def build_messages(document: MemoryDocument, pages: Sequence[Page], signals: Signals) -> list[dict[str, str]]:
    """The chat messages for one update: current memory, the new exchanges, and any hints."""
    memory = {
        "user": document.user.model_dump(),
        "history": document.history.model_dump(),
        "facts": [
            {"id": fact.id, "content": fact.content, "category": fact.category, "confidence": fact.confidence}
            for fact in current(document.facts)
        ],
        "assistantKnowledge": [entry.content for entry in document.assistantKnowledge],
    }
    conversation = "\n\n".join(
        f"[{page.timestamp}]\nUser: {page.user_input}\nAssistant: {page.agent_response}" for page in pages
    )
    hints = []
    if signals.correction:
        hints.append("The user appears to correct the assistant here: look for what was wrong.")
    if signals.reinforcement:
        hints.append("The user appears to confirm the assistant got something right.")
    user_message = (
        f"Current memory:\n{json.dumps(memory, ensure_ascii=False, indent=1)}\n\n"
        f"New conversation:\n{conversation}\n\n"
        + ("Hints:\n" + "\n".join(f"- {hint}" for hint in hints) + "\n\n" if hints else "")
        + "Reply with the JSON update only."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user_message}]
