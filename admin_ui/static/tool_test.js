// mcp-registry web UI: the tool test-call page (/ui/tools/NAME/test). The page works without this
// file (the form posts and the server answers the result page); with it, the same POST is sent with
// fetch() asking for text/event-stream, and progress and log messages are shown as they stream in.
// Everything the webhook sent is written with textContent: it is untrusted and never becomes HTML.
(function () {
  "use strict";

  var INLINE_IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
  var BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
  var NOTIFICATION_CHARS = 2000;

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function cut(text) {
    return text.length <= NOTIFICATION_CHARS ? text : text.slice(0, NOTIFICATION_CHARS - 1) + "\u2026";
  }

  function json(value) { return JSON.stringify(value, null, 2); }

  // ------------------------------------------------------------------ form or raw JSON

  function readField(field) {
    // The value one generated field sends, as the server reads it; undefined: not sent.
    var widget = field.getAttribute("data-widget");
    var control = field.querySelector("input, select, textarea");
    if (!control) { return undefined; }
    if (widget === "checkbox") { return control.checked; }
    if (widget === "select") {
      var option = control.options[control.selectedIndex];
      if (!option || option.value === "") { return undefined; }
      return JSON.parse(option.getAttribute("data-json"));
    }
    var raw = control.value;
    if (widget === "number" || widget === "integer") {
      if (raw.trim() === "") { return undefined; }
      var number = Number(raw);
      if (!isFinite(number)) { throw new Error("not a number"); }
      return number;
    }
    if (widget === "text") {
      var empty = field.querySelector(".send-empty input");
      if (raw === "" && !(empty && empty.checked)) { return undefined; }
      return raw;
    }
    if (raw.trim() === "") { return undefined; }
    return JSON.parse(raw);
  }

  // ------------------------------------------------------------------ required fields, before sending

  // The message of a required field left empty (the server's own words, from data-required-message),
  // or "" when the field has a value (or is not required). The server checks the same again.
  function missing(field) {
    var message = field.getAttribute("data-required-message");
    if (!message) { return ""; }
    var widget = field.getAttribute("data-widget");
    var control = field.querySelector("input, select, textarea");
    if (!control || widget === "checkbox") { return ""; }
    if (widget === "text") {
      var empty = field.querySelector(".send-empty input");
      return control.value === "" && !(empty && empty.checked) ? message : "";
    }
    return control.value.trim() === "" ? message : "";
  }

  function clearFieldError(field) {
    var control = field.querySelector("input, select, textarea");
    var old = field.querySelector(".field-error");
    if (old) { old.remove(); }
    if (!control) { return; }
    control.removeAttribute("aria-invalid");
    var ids = (control.getAttribute("aria-describedby") || "").split(" ").filter(function (id) {
      return id && id !== control.id + "-error";
    });
    if (ids.length) { control.setAttribute("aria-describedby", ids.join(" ")); }
    else { control.removeAttribute("aria-describedby"); }
  }

  function markFieldError(field, message) {
    var control = field.querySelector("input, select, textarea");
    var note = el("p", "field-error", field.getAttribute("data-label") + ": " + message);
    note.id = control.id + "-error";
    field.appendChild(note);
    control.setAttribute("aria-invalid", "true");
    var described = control.getAttribute("aria-describedby");
    control.setAttribute("aria-describedby", (described ? described + " " : "") + note.id);
  }

  // Marks every required field left empty at the field, says so above the form and focuses the
  // first; true when the form may be sent.
  function checkRequired(form) {
    var formPart = document.getElementById("args-form");
    var mode = form.querySelector('input[name="mode"]:checked');
    var fields = formPart.querySelectorAll("[data-arg-name]");
    var first = null;
    fields.forEach(function (field) {
      clearFieldError(field);
      if (mode && mode.value === "json") { return; }
      var message = missing(field);
      if (message) {
        markFieldError(field, message);
        if (!first) { first = field.querySelector("input, select, textarea"); }
      }
    });
    var alert = document.getElementById("form-error");
    if (!first) {
      if (alert) { alert.remove(); }
      return true;
    }
    if (!alert) {
      alert = el("p", "error");
      alert.id = "form-error";
      alert.setAttribute("role", "alert");
      document.getElementById("arguments-heading").after(alert);
    }
    alert.textContent = "Some fields need attention (see the messages below them): nothing was sent.";
    first.focus();
    return false;
  }

  function formArguments(container) {
    var args = {};
    container.querySelectorAll("[data-arg-name]").forEach(function (field) {
      var value = readField(field);
      if (value !== undefined) { args[field.getAttribute("data-arg-name")] = value; }
    });
    return args;
  }

  function setUpModes(form) {
    var formPart = document.getElementById("args-form");
    var jsonPart = document.getElementById("args-json");
    var jsonArea = document.getElementById("arguments-json");
    var radios = form.querySelectorAll('input[name="mode"]');
    function show(fill) {
      var mode = form.querySelector('input[name="mode"]:checked');
      var json = mode && mode.value === "json";
      formPart.hidden = json;
      jsonPart.hidden = !json;
      if (json && fill && formPart.querySelector("[data-arg-name]")) {
        try { jsonArea.value = JSON.stringify(formArguments(formPart), null, 2); } catch (e) { /* keep the text */ }
      }
    }
    radios.forEach(function (radio) { radio.addEventListener("change", function () { show(true); }); });
    show(false);
  }

  // ------------------------------------------------------------------ showing what comes back

  function Output(form) {
    this.section = document.getElementById("test-output");
    this.status = document.getElementById("test-status");
    this.progress = document.getElementById("test-progress");
    this.list = document.getElementById("test-notifications");
    this.none = document.getElementById("test-notifications-none");
    this.omitted = document.getElementById("test-omitted");
    this.result = document.getElementById("test-result");
    this.maxShown = parseInt(form.getAttribute("data-max-shown"), 10) || 200;
    this.shown = 0;
  }

  Output.prototype.reset = function (text) {
    this.section.hidden = false;
    this.list.replaceChildren();
    this.result.replaceChildren();
    this.none.hidden = false;
    this.none.textContent = "None yet.";
    this.omitted.hidden = true;
    this.shown = 0;
    this.progress.hidden = false;
    this.progress.removeAttribute("value");  // indeterminate until a total is known
    this.say(text);
  };

  Output.prototype.say = function (text) { this.status.textContent = text; };

  Output.prototype.notification = function (seconds, notification) {
    var params = notification.params || {};
    var kind, level, text;
    if (notification.method === "notifications/progress") {
      kind = "progress";
      level = "progress";
      text = String(params.progress);
      if (params.total !== undefined && params.total !== null) { text += " / " + params.total; }
      if (params.message) { text += " \u2014 " + params.message; }
      if (typeof params.total === "number" && params.total > 0) {
        this.progress.max = params.total;
        this.progress.value = Math.min(params.progress, params.total);
      }
    } else {
      kind = "log";
      level = String(params.level || "info");
      text = typeof params.data === "string" ? params.data : JSON.stringify(params.data);
    }
    if (this.shown >= this.maxShown) { return; }
    this.shown += 1;
    var item = el("li", "note-" + kind);
    item.appendChild(el("span", "note-time", seconds.toFixed(2) + " s"));
    item.appendChild(document.createTextNode(" "));
    item.appendChild(el("span", "note-level", level));
    item.appendChild(document.createTextNode(" "));
    item.appendChild(el("span", "note-text", cut(text)));
    this.list.appendChild(item);
    this.none.hidden = true;
  };

  Output.prototype.block = function (block, index) {
    var box = el("div", "content-block");
    var type = block && typeof block === "object" ? String(block.type || "") : "";
    var mime = block && typeof block === "object" && block.mimeType ? String(block.mimeType) : "";
    box.appendChild(el("p", "block-type", type + (mime ? " \u00b7 " + mime : "")));
    var pre;
    if (type === "text") {
      pre = el("pre", "", block.text);
      pre.setAttribute("aria-label", "Text content " + index);
    } else if (type === "image" || type === "audio") {
      var data = typeof block.data === "string" ? block.data : "";
      if (type === "image" && INLINE_IMAGE_TYPES.indexOf(mime) >= 0 && BASE64.test(data)) {
        var image = el("img", "result-image");
        image.alt = "Image " + index + " returned by the tool";
        image.src = "data:" + mime + ";base64," + data;
        box.appendChild(image);
      }
      box.appendChild(el("p", "muted", Math.floor(data.length * 3 / 4).toLocaleString("en") + " bytes"));
    } else if (type === "resource" && block.resource && typeof block.resource === "object") {
      box.appendChild(el("p", "mono", block.resource.uri || ""));
      if (typeof block.resource.text === "string") {
        pre = el("pre", "", block.resource.text);
        pre.setAttribute("aria-label", "Resource content " + index);
      }
    } else if (type === "resource_link") {
      box.appendChild(el("p", "mono", String(block.uri || "") + (block.name ? " (" + block.name + ")" : "")));
    } else {
      pre = el("pre", "", json(block));
      pre.setAttribute("aria-label", "Content " + index);
    }
    if (pre) {
      pre.tabIndex = 0;
      box.appendChild(pre);
    }
    return box;
  };

  Output.prototype.finish = function (data, ran) {
    var result = data.result || {};
    this.progress.hidden = true;
    if (this.shown === 0) { this.none.textContent = "None."; }
    if (data.omitted) {
      this.omitted.hidden = false;
      this.omitted.textContent = data.omitted + " more not shown (at most " + this.maxShown + " are listed).";
    }
    var box = this.result;
    if (result.isError) {
      var flag = el("p", "error result-flag", "The tool answered with an error (isError: true), as an agent would see it.");
      box.appendChild(flag);
    } else {
      box.appendChild(el("p", "notice result-flag", "The tool answered (isError: false)."));
    }
    box.appendChild(el("h3", "", "Content"));
    var content = Array.isArray(result.content) ? result.content : [];
    var self = this;
    content.forEach(function (block, i) { box.appendChild(self.block(block, i + 1)); });
    if (content.length === 0) { box.appendChild(el("p", "muted", "No content.")); }
    if (result.structuredContent !== undefined) {
      box.appendChild(el("h3", "", "Structured content"));
      var structured = el("pre", "", json(result.structuredContent));
      structured.tabIndex = 0;
      structured.setAttribute("aria-label", "Structured content");
      box.appendChild(structured);
    }
    var details = el("details");
    details.appendChild(el("summary", "", "The whole result as JSON"));
    var whole = el("pre", "", json(result));
    whole.tabIndex = 0;
    whole.setAttribute("aria-label", "The whole result");
    details.appendChild(whole);
    box.appendChild(details);
    this.say("Ran " + ran + " in " + Number(data.t || 0).toFixed(2) + " s.");
  };

  Output.prototype.fail = function (message) {
    this.progress.hidden = true;
    this.result.replaceChildren(el("p", "error", message));
    this.say(message);
  };

  // ------------------------------------------------------------------ the stream

  function describe(started) {
    return "version " + started.version + (started.label ? " (" + started.label + ")" : "");
  }

  // Calls onEvent(name, data) for each server-sent event of the response's body.
  async function readEvents(response, onEvent) {
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    for (;;) {
      var chunk = await reader.read();
      if (chunk.done) { break; }
      buffer += decoder.decode(chunk.value, { stream: true }).replace(/\r\n?/g, "\n");
      var end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        var block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        var name = "message";
        var data = [];
        block.split("\n").forEach(function (line) {
          if (line.indexOf("event:") === 0) { name = line.slice(6).trim(); }
          else if (line.indexOf("data:") === 0) { data.push(line.slice(5).replace(/^ /, "")); }
        });
        if (data.length) { onEvent(name, JSON.parse(data.join("\n"))); }
      }
    }
  }

  function setUpRun(form) {
    if (!window.fetch || !window.TextDecoder || !window.AbortController || !window.ReadableStream) { return; }
    var output = new Output(form);
    var run = document.getElementById("run-button");
    var stop = document.getElementById("stop-button");
    var controller = null;

    stop.addEventListener("click", function () {
      if (controller) { controller.abort(); }
    });

    form.addEventListener("submit", async function (event) {
      event.preventDefault();
      if (controller) { return; }
      if (!checkRequired(form)) { return; }
      var csrf = form.querySelector('input[name="csrf_token"]').value;
      controller = new AbortController();
      run.disabled = true;
      stop.hidden = false;
      output.reset("Starting the test call\u2026");
      var ran = "the tool";
      var ended = false;
      try {
        var response = await fetch(form.action, {
          method: "POST",
          body: new URLSearchParams(new FormData(form)),
          headers: { "Accept": "text/event-stream", "X-CSRF-Token": csrf },
          credentials: "same-origin",
          signal: controller.signal
        });
        var type = response.headers.get("content-type") || "";
        if (!response.ok || type.indexOf("text/event-stream") !== 0) {
          // No stream (a form error, a limit, an ended session): let the browser post the form
          // as it would without this script, and show the page the server answers.
          controller.abort();
          controller = null;
          form.submit();
          return;
        }
        await readEvents(response, function (name, data) {
          if (name === "started") {
            ran = describe(data);
            output.say("Running " + ran + "\u2026");
          } else if (name === "notification") {
            output.notification(Number(data.t || 0), data.notification || {});
          } else if (name === "result") {
            ended = true;
            output.finish(data, ran);
          } else if (name === "failed") {
            ended = true;
            output.fail(String(data.message || "The test call failed."));
          }
        });
        if (!ended) { output.fail("The connection ended before the result came."); }
      } catch (error) {
        if (error && error.name === "AbortError") {
          output.fail("Stopped: the call was cancelled.");
        } else {
          output.fail("The test call could not be completed: " + (error && error.message ? error.message : error));
        }
      } finally {
        controller = null;
        run.disabled = false;
        stop.hidden = true;
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("tool-test-form");
    if (!form) { return; }
    setUpModes(form);
    setUpRun(form);
  });
})();
