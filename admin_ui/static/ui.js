// mcp-registry web UI: small progressive enhancements. Every page works without this file.
(function () {
  "use strict";

  // "Copy" buttons: <button data-copy="ID" hidden> copies the value of the input #ID.
  function setUpCopyButtons(root) {
    root.querySelectorAll("button[data-copy]").forEach(function (button) {
      if (!navigator.clipboard) { return; }
      button.hidden = false;
      button.addEventListener("click", function () {
        var id = button.getAttribute("data-copy");
        var input = document.getElementById(id);
        var status = document.querySelector('[data-copied-for="' + id + '"]');
        if (!input) { return; }
        navigator.clipboard.writeText(input.value).then(function () {
          if (status) { status.textContent = "Copied."; }
        }, function () {
          input.select();
          if (status) { status.textContent = "Press Ctrl+C to copy."; }
        });
      });
    });
  }

  // A read-only token value is selected whole when it gets focus.
  function setUpSelectOnFocus(root) {
    root.querySelectorAll("input.token-value[readonly]").forEach(function (input) {
      input.addEventListener("focus", function () { input.select(); });
    });
  }

  // The "saved meanwhile" banner: an entry's pages listen (server-sent events) for newer versions.
  function setUpLiveBanner() {
    var banner = document.getElementById("live-banner");
    if (!banner || !window.EventSource) { return; }
    var shown = 0;
    var source = new EventSource(banner.getAttribute("data-events"));
    source.addEventListener("saved", function (event) {
      var saved;
      try { saved = JSON.parse(event.data); } catch (e) { return; }
      if (typeof saved.version !== "number" || saved.version <= shown) { return; }
      shown = saved.version;
      var who = saved.by_you ? "You (in another window or tab)" : saved.author;
      var text = who + " saved version " + saved.version + (saved.note ? " (\u201c" + saved.note + "\u201d)" : "") + ". ";
      text += banner.getAttribute("data-editing") === "yes"
        ? "Your edits are not lost: saving now shows their change and keeps your text."
        : "This page shows an older version.";
      banner.textContent = "";
      banner.appendChild(document.createTextNode(text + " "));
      var diff = document.createElement("a");
      diff.href = banner.getAttribute("data-diff") + saved.version;
      diff.textContent = "See what changed";
      banner.appendChild(diff);
      if (banner.getAttribute("data-editing") !== "yes") {
        banner.appendChild(document.createTextNode(" \u00b7 "));
        var reload = document.createElement("a");
        reload.href = banner.getAttribute("data-entry");
        reload.textContent = "Show the newest version";
        banner.appendChild(reload);
      }
      banner.hidden = false;
    });
    source.addEventListener("gone", function () { source.close(); });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  // A request htmx sends after the session ended (token revoked, session expired) is answered 401
  // with the session-ended alert (registry/ui/errors.py), not a redirect: the page stays. The
  // alert goes into #session-ended where the page has one (the entry editors, whose edits
  // drafts.js keeps); from anywhere else the browser goes to the sign-in page, as it did before
  // (and comes back to that page after signing in).
  document.addEventListener("htmx:beforeSwap", function (event) {
    var detail = event.detail;
    if (!detail.xhr || detail.xhr.status !== 401) { return; }
    var box = document.getElementById("session-ended");
    if (box) {
      detail.target = box;
      detail.swapOverride = "innerHTML";
      detail.shouldSwap = true;
      detail.isError = false;
      return;
    }
    event.preventDefault();
    // Replacing this page: Back after signing in does not return to a page whose session is gone.
    var signin = detail.xhr.getResponseHeader("X-Sign-In") || "";
    window.location.replace(signin.indexOf("/ui/signin?") === 0 ? signin : "/ui/signin");
  });

  document.addEventListener("DOMContentLoaded", function () {
    setUpCopyButtons(document);
    setUpSelectOnFocus(document);
    setUpLiveBanner();
  });
})();
