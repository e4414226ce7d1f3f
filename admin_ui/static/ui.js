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

  document.addEventListener("DOMContentLoaded", function () {
    setUpCopyButtons(document);
    setUpSelectOnFocus(document);
  });
})();
