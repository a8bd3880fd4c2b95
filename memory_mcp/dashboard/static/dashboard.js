// The dashboard's pages work without this script, but for two things it adds:
// - a form sent from a page is answered in place: a refused change shows its reason beside the
//   form, with what was typed, and the address stays the page's own (a reload never re-sends it);
// - behind bearer tokens (<html data-auth="token">) a browser would send no token when it follows
//   a link, so every link and form is fetched with the token (kept in this tab's session storage,
//   never in a URL or cookie) and the answer shown in place.
"use strict";

(() => {
  const TOKEN_KEY = "memory-mcp-token";
  const behindTokens = document.documentElement.dataset.auth === "token";
  const withoutHash = (address) => address.split("#")[0];
  let shown = withoutHash(location.href); // the address of the page on screen

  // Fetch `url` and show the answer in place. `remember`: "push" a new history entry, "replace"
  // the current one, "if-done" (a change: push the page the server sent us on to, unless it is
  // this one; a refusal keeps the address) or "none".
  async function open(url, init, remember) {
    const headers = new Headers();
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (behindTokens && token) headers.set("Authorization", `Bearer ${token}`);
    let response;
    try {
      response = await fetch(url, { ...init, headers, credentials: "same-origin" });
    } catch (error) {
      announce(`The server did not answer (${error.message}). Nothing was changed on this page.`);
      return;
    }
    if (behindTokens && response.status === 401) sessionStorage.removeItem(TOKEN_KEY);
    const type = response.headers.get("Content-Type") || "";
    if (!type.startsWith("text/html")) {
      await save(response);
      return;
    }
    show(await response.text());
    const done = response.redirected && response.ok;
    if (remember === "push" || (remember === "if-done" && done && response.url !== location.href)) {
      history.pushState(null, "", response.url);
    } else if (remember === "replace") history.replaceState(null, "", response.url);
    shown = withoutHash(location.href);
  }

  // Put a fetched page in place of this one, and bring the keyboard to what matters on it.
  function show(html) {
    const next = new DOMParser().parseFromString(html, "text/html");
    document.title = next.title;
    document.body.replaceWith(document.adoptNode(next.body));
    const target = document.querySelector("[role=alert]") || document.querySelector("h1");
    if (target) {
      target.tabIndex = -1;
      target.focus();
      target.scrollIntoView({ block: "center" });
    }
    askForTokenIfNeeded();
  }

  // A download (the export): the answer saved under the name the server gives it.
  async function save(response) {
    if (!response.ok) {
      announce(`The download failed (${response.status}).`);
      return;
    }
    const named = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
    const link = document.createElement("a");
    link.href = URL.createObjectURL(await response.blob());
    link.download = named ? named[1] : "memory.json";
    link.click(); // never in the document, so this script's own link handling does not see it
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  }

  function announce(text) {
    const note = document.createElement("p");
    note.className = "error";
    note.setAttribute("role", "alert");
    note.textContent = text;
    document.querySelector("main").prepend(note);
  }

  // The page that asks for the token: with one kept already, fetch the page asked for at once.
  function askForTokenIfNeeded() {
    if (!document.querySelector("[data-needs-token]")) return;
    const problem = document.querySelector("[data-needs-token] [role=alert]");
    if (sessionStorage.getItem(TOKEN_KEY) && !problem) open(location.href, { method: "GET" }, "replace");
    else document.getElementById("token")?.focus();
  }

  function sameSite(url) {
    return url.origin === location.origin;
  }

  document.addEventListener("submit", (event) => {
    const form = event.target;
    event.preventDefault();
    if (form.id === "token-form") {
      sessionStorage.setItem(TOKEN_KEY, form.elements.token.value.trim());
      open(location.href, { method: "GET" }, "replace");
      return;
    }
    const data = new FormData(form, event.submitter);
    if ((form.getAttribute("method") || "get").toLowerCase() === "get") {
      const url = new URL(form.action);
      url.search = new URLSearchParams(data).toString();
      open(url.href, { method: "GET" }, "push");
    } else {
      open(form.action, { method: "POST", body: data }, "if-done");
    }
  });

  document.addEventListener("click", (event) => {
    if (event.target.closest("[data-sign-out]")) {
      sessionStorage.removeItem(TOKEN_KEY);
      location.reload();
      return;
    }
    if (!behindTokens || event.defaultPrevented || event.button !== 0) return;
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    const link = event.target.closest("a[href]");
    if (!link || link.target) return;
    const url = new URL(link.href);
    if (!sameSite(url) || (url.hash && url.pathname === location.pathname && url.search === location.search)) return;
    event.preventDefault();
    open(url.href, { method: "GET" }, link.hasAttribute("download") ? "none" : "push");
  });

  window.addEventListener("popstate", () => {
    if (withoutHash(location.href) !== shown) open(location.href, { method: "GET" }, "none");
  });

  askForTokenIfNeeded();
})();
