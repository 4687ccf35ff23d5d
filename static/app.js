// Ragdesk UI behaviour that HTML attributes cannot express. No inline script anywhere (CSP).
(function () {
  "use strict";

  function $(selector) { return document.querySelector(selector); }

  // Dialogs: [data-open-dialog=id] opens, [data-close-dialog] closes the enclosing dialog.
  // A field marked [data-select-on-open] (the rename dialog's title) gets the focus, its
  // text selected, so typing replaces it.
  document.addEventListener("click", function (event) {
    var opener = event.target.closest("[data-open-dialog]");
    if (opener) {
      var dialog = document.getElementById(opener.dataset.openDialog);
      dialog.showModal();
      var field = dialog.querySelector("[data-select-on-open]");
      if (field) { field.focus(); field.select(); }
    }
    var closer = event.target.closest("[data-close-dialog]");
    if (closer) { closer.closest("dialog").close(); }
  });

  // hx-confirm asks in the app's own dialog, not the browser's confirm(): its text is the
  // question, [data-confirm-title] and [data-confirm-button] its title and OK button.
  document.addEventListener("htmx:confirm", function (event) {
    var dialog = $("#confirm-dialog");
    if (!event.detail.question || !dialog) { return; }  // no question: no dialog (or confirm())
    event.preventDefault();
    var elt = event.detail.elt;
    $("#confirm-title").textContent = elt.dataset.confirmTitle || "Are you sure?";
    $("#confirm-text").textContent = event.detail.question;
    $("#confirm-ok").textContent = elt.dataset.confirmButton || "OK";
    $("#confirm-ok").classList.toggle("danger", elt.dataset.confirmButton === "Delete");
    dialog.returnValue = "";
    dialog.addEventListener("close", function () {
      if (dialog.returnValue !== "ok") { return; }
      if (document.body.contains(elt)) { event.detail.issueRequest(true); } else { resend(elt); }
    }, { once: true });
    dialog.showModal();
  });

  // A row that refreshes itself (a document being ingested) may be replaced while the dialog
  // is open, and htmx drops a request whose element has left the page: the confirmed action
  // then goes out as the same request from the row that replaced it.
  function resend(elt) {
    var verbs = ["delete", "post", "put", "patch"];
    var target = elt.getAttribute("hx-target");
    var found = null;
    try { found = target ? document.querySelector(target) : null; } catch (e) { found = null; }
    if (target && !found) {  // "closest tr" and the like: nothing left to aim at
      var toast = $("#toast");
      if (toast) {
        toast.textContent = "The page changed while you confirmed, so nothing was done. Try again.";
        toast.classList.add("visible");
        window.setTimeout(function () { toast.classList.remove("visible"); }, 6000);
      }
      return;
    }
    for (var n = 0; n < verbs.length; n++) {
      var url = elt.getAttribute("hx-" + verbs[n]);
      if (!url) { continue; }
      htmx.ajax(verbs[n].toUpperCase(), url, {
        source: found || document.body,
        target: found || undefined,
        swap: elt.getAttribute("hx-swap") || undefined,
        values: htmx.values(elt)
      });
      return;
    }
  }

  // An answer's Copy button: its text with the citation markers as shown, then "Copied".
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy-answer]");
    if (!button) { return; }
    copyText(button.dataset.copyAnswer).then(
      function () { button.textContent = "Copied"; },
      function () { button.textContent = "Copy failed"; }
    );
    window.setTimeout(function () { button.textContent = "Copy"; }, 2000);
  });

  // A one-time secret's Copy button (a new API key, a new user's password).
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy-from]");
    if (!button) { return; }
    var source = document.getElementById(button.dataset.copyFrom);
    copyText(source ? source.textContent.trim() : "").then(
      function () { button.textContent = "Copied"; },
      function () { button.textContent = "Copy failed"; }
    );
    window.setTimeout(function () { button.textContent = "Copy"; }, 2000);
  });

  // Feedback: after 👍/👎 the comment popover opens (both optional); Skip or Escape closes it.
  function closeFeedback(form) {
    form.hidden = true;
    var chosen = form.parentElement.querySelector(".feedback-choice[aria-pressed=true]");
    if (chosen) { chosen.focus(); }
  }
  document.addEventListener("click", function (event) {
    var skip = event.target.closest("[data-feedback-close]");
    if (skip) { closeFeedback(skip.closest("form")); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || document.querySelector("dialog[open]")) { return; }
    var form = (event.target.closest && event.target.closest(".feedback-form")) ||
      document.querySelector(".feedback-form:not([hidden])");
    if (form) { event.preventDefault(); event.stopPropagation(); closeFeedback(form); }
  });
  htmx.onLoad(function (root) {
    var form = root.querySelector ? root.querySelector(".feedback-form:not([hidden])") : null;
    if (!form) { return; }
    // One popover at a time: an earlier one left open would cover the next question.
    document.querySelectorAll(".feedback-form:not([hidden])").forEach(function (other) {
      if (other !== form) { other.hidden = true; }
    });
    form.querySelector("textarea").focus();
  });

  // The question's scope: the collections ticked ("" when all are, so collections added
  // later are searched too); at least one stays ticked. An existing conversation keeps the
  // choice at once, a new one with its first question.
  document.addEventListener("change", function (event) {
    var box = event.target.closest("[data-scope-collection]");
    if (!box) { return; }
    var boxes = Array.prototype.slice.call(document.querySelectorAll("[data-scope-collection]"));
    var ticked = boxes.filter(function (b) { return b.checked; });
    if (!ticked.length) { box.checked = true; ticked = [box]; }
    var all = ticked.length === boxes.length;
    $("#scope-input").value = all ? "" : ticked.map(function (b) { return b.value; }).join(",");
    $("#scope-label").textContent = all ? "All collections" : ticked.map(function (b) { return b.dataset.name; }).join(", ");
    var conversation = $("#conversation-id");
    if (conversation && conversation.value) {
      htmx.ajax("POST", "/ui/conversations/" + conversation.value + "/scope", {
        source: "#scope-input", values: { scope: $("#scope-input").value }, swap: "none",
      });
    }
  });
  document.addEventListener("click", function (event) {  // a click elsewhere closes it
    var open = $("#scope-details[open]");
    if (open && !event.target.closest("#scope-details")) { open.open = false; }
  });
  document.addEventListener("keydown", function (event) {
    var open = $("#scope-details[open]");
    if (event.key === "Escape" && open) {
      open.open = false;
      $("#scope-summary").focus();
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  // Suggested first questions on an empty chat: a click asks it.
  document.addEventListener("click", function (event) {
    var suggestion = event.target.closest("[data-suggest]");
    var question = $("#question");
    if (!suggestion || !question || answering()) { return; }
    question.value = suggestion.dataset.suggest;
    htmx.trigger("#ask-form", "submit");
  });

  // Just signed in: the question box has the focus (not on every page: the single-key
  // shortcuts work only while no text box has it).
  document.addEventListener("DOMContentLoaded", function () {
    var question = $("#question");
    var referrer = null;
    try { referrer = document.referrer ? new URL(document.referrer) : null; } catch (error) { referrer = null; }
    if (question && referrer && referrer.origin === window.location.origin && referrer.pathname === "/login") {
      question.focus();
    }
  });

  // Re-uploading identical content: the server answers with the existing document's row,
  // marked "already uploaded"; it replaces that document's earlier row in the list, and
  // keeps its note while it polls its status (the polled row knows nothing of uploads).
  var duplicateNotes = {};
  document.addEventListener("htmx:beforeSwap", function (event) {
    var row = event.detail.target;
    if (row && row.matches && row.matches(".upload-row[data-duplicate]")) {
      duplicateNotes[row.id] = row.querySelector(".duplicate-note");
    }
  });
  document.addEventListener("htmx:afterSwap", function () {
    Object.keys(duplicateNotes).forEach(function (id) {
      var row = document.getElementById(id), note = duplicateNotes[id];
      delete duplicateNotes[id];
      if (!row || !note || row.hasAttribute("data-duplicate")) { return; }
      row.setAttribute("data-duplicate", "");
      row.querySelector(".status").after(note);
    });
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    if (!event.detail.target || event.detail.target.id !== "upload-rows") { return; }
    Array.prototype.forEach.call(document.querySelectorAll("#upload-rows .upload-row[data-duplicate]"), function (row) {
      if (!row.isConnected) { return; }  // an older row of the same document, just removed
      Array.prototype.forEach.call(document.querySelectorAll("#upload-rows [id='" + row.id + "']"), function (other) {
        if (other !== row) { other.remove(); }
      });
    });
  });

  // Escape stops the answer being written (an open dialog closes first, natively).
  function stopAnswer() {
    var stop = document.querySelector("article.streaming .stop-button:not([disabled])");
    if (stop) { stop.click(); }
    return !!stop;
  }
  document.addEventListener("click", function (event) {  // after htmx sent the request
    var stop = event.target.closest(".stop-button");
    if (stop) { stop.disabled = true; stop.textContent = "Stopping…"; }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && !document.querySelector("dialog[open]") && stopAnswer()) {
      event.preventDefault();
    }
  });

  // Single-key shortcuts, when no text box has the focus (the ? dialog lists them).
  var SHORTCUTS = {
    "/": function () { var q = $("#question"); if (q) { q.focus(); } },
    "n": function () { window.location.href = "/"; },
    "u": function () { openDialog("upload-dialog"); },
    "t": function () { var b = $("#theme-toggle"); if (b) { b.click(); } },
    "?": function () { openDialog("help-dialog"); },
    "f": function () { findConversation(); },
    "j": function () { goToConversation(1); },
    "k": function () { goToConversation(-1); },
    "b": function () { window.ragdeskTogglePane("sidebar"); },
    "i": function () { window.ragdeskTogglePane("inspector"); },
    "[": function () { follow("#citation-prev"); },
    "]": function () { follow("#citation-next"); },
  };
  function findConversation() {  // the sidebar's filter box, showing the sidebar if hidden
    var box = $("#conversation-filter");
    if (!box) { return; }
    if (box.offsetParent === null) { window.ragdeskTogglePane("sidebar"); }
    box.focus();
    box.select();
  }
  function follow(selector) {  // the viewer's Previous / Next citation links
    var link = $(selector);
    if (link) { window.location.href = link.getAttribute("href"); }
  }
  // Next (j) and previous (k) conversation, in the sidebar's order.
  function goToConversation(step) {
    var links = Array.prototype.slice.call(document.querySelectorAll("#conversation-list a[href^='/c/']"));
    if (!links.length) { return; }
    var current = links.findIndex(function (a) { return a.getAttribute("aria-current") === "page"; });
    var next = current < 0 ? (step > 0 ? 0 : links.length - 1) : current + step;
    if (next >= 0 && next < links.length) { window.location.href = links[next].getAttribute("href"); }
  }
  function openDialog(id) {
    var dialog = document.getElementById(id);
    if (dialog && !dialog.open && !document.querySelector("dialog[open]")) { dialog.showModal(); }
  }
  function typing(target) {
    return target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName);
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) { return; }
    var action = SHORTCUTS[event.key];
    if (action) { event.preventDefault(); action(); }
  });

  // The question box sends its draft (hx-trigger "draft-word") at each word's end, and at
  // a question mark (the question is likely complete: its draft then finds the passages
  // the answer will), as well as after a pause: a person typing steadily never pauses long
  // enough for the latter. (A trigger filter like keyup[key==' '] would need eval, which
  // the CSP forbids.)
  document.addEventListener("keyup", function (event) {
    var ends = event.key === " " || event.key === "?";
    if (event.target.id === "question" && ends && event.target.hasAttribute("hx-post")) {
      htmx.trigger(event.target, "draft-word");
    }
  });

  // Enter sends, Shift+Enter inserts a newline. Nothing is sent while an answer is being
  // written (the server refuses a second question in the conversation with 409 anyway).
  function answering() { return !!document.querySelector("#messages article.msg.streaming"); }
  document.addEventListener("keydown", function (event) {
    if (event.target.id === "question" && event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      if (event.target.value.trim() && !answering()) { htmx.trigger("#ask-form", "submit"); }
    }
  });
  // Send is disabled from the moment an answer starts streaming until it ends (done, error
  // or stopped: each replaces the streaming article).
  function syncSend() {
    var send = $("#ask-form button[type=submit]");
    if (!send) { return; }
    var busy = answering();
    send.disabled = busy;
    send.title = busy ? "Wait for the answer being written, or stop it (Esc)" : "";
  }
  document.addEventListener("DOMContentLoaded", function () {
    var messages = $("#messages");
    if (!messages) { return; }
    new MutationObserver(syncSend).observe(messages, { childList: true, subtree: true, attributes: true, attributeFilter: ["class"] });
    syncSend();
  });

  // Clear the question once it is sent; keep the newest message in view.
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.elt.id === "ask-form" && event.detail.successful) { $("#question").value = ""; }
    if (event.detail.elt.id === "upload-form" && event.detail.successful && event.detail.xhr.status < 400) {
      $("#upload-input").value = "";  // a failed upload keeps its files, to try again
      htmx.trigger(document.body, "documents-changed");
    }
  });
  document.addEventListener("htmx:afterSwap", function () {
    var messages = $("#messages");
    if (messages) { messages.scrollTop = messages.scrollHeight; }
  });
  document.addEventListener("htmx:sseMessage", function () {
    var messages = $("#messages");
    if (messages) { messages.scrollTop = messages.scrollHeight; }
  });
  // An opened conversation shows its latest answer, selected: its sources are in the pane.
  (function showLatest() {
    var messages = $("#messages");
    if (!messages) { return; }
    var answers = messages.querySelectorAll("article.msg.assistant");
    if (answers.length) { answers[answers.length - 1].classList.add("selected"); }
    messages.scrollTop = messages.scrollHeight;
  })();

  // The status bar's upload badge: files being sent, then processed, still counted after the
  // dialog is closed (each row in it polls its own status); a click reopens the dialog. When
  // all are indexed or failed it shows the result for a few seconds, then hides.
  var sending = 0, badgeTimer = null;
  function updateUploadBadge() {
    var badge = $("#upload-badge");
    if (!badge) { return; }
    var rows = document.querySelectorAll("#upload-rows .upload-row:not([data-reported])");
    // Queued files wait their turn and are not being processed yet; a file refused at
    // upload (its type, its size) was never accepted, so it is "refused", not "failed".
    var queued = 0, processing = 0, indexed = 0, failed = 0, refused = 0;
    Array.prototype.forEach.call(rows, function (row) {
      var status = row.dataset.status;
      if (status === "indexed") { indexed++; }
      else if (status === "failed") { failed++; }
      else if (status === "rejected") { refused++; }
      else if (status === "queued") { queued++; }
      else { processing++; }
    });
    var busy = [];
    if (sending) { busy.push("Uploading " + sending); }
    if (processing) { busy.push("Processing " + processing); }
    if (queued) { busy.push(queued + " queued"); }
    if (busy.length) {
      window.clearTimeout(badgeTimer);
      badge.dataset.state = "busy";
      badge.textContent = busy.join(" · ");
      badge.hidden = false;
      return;
    }
    if (badge.dataset.state !== "busy") { return; }
    if (!indexed && !failed && !refused) { badge.hidden = true; badge.dataset.state = ""; return; }
    badge.dataset.state = failed || refused ? "failed" : "done";
    var parts = [];
    if (indexed) { parts.push(indexed + " indexed"); }
    if (failed) { parts.push(failed + " failed"); }
    if (refused) { parts.push(refused + " refused"); }
    badge.textContent = "Uploads done: " + parts.join(" · ");
    badge.hidden = false;
    Array.prototype.forEach.call(rows, function (row) { row.dataset.reported = ""; });
    badgeTimer = window.setTimeout(function () { badge.hidden = true; }, 5000);
  }
  document.addEventListener("htmx:beforeRequest", function (event) {
    var input = $("#upload-input");
    if (event.detail.elt.id === "upload-form" && input) {
      sending = input.files.length;
      updateUploadBadge();
    }
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.elt.id === "upload-form") { sending = 0; updateUploadBadge(); }
  });
  document.addEventListener("DOMContentLoaded", function () {
    var rows = $("#upload-rows");
    if (!rows) { return; }
    new MutationObserver(updateUploadBadge).observe(rows, {
      childList: true, subtree: true, attributes: true, attributeFilter: ["data-status"],
    });
  });

  // Upload progress (bytes sent), per request.
  document.addEventListener("htmx:xhr:progress", function (event) {
    var bar = $("#upload-progress");
    if (bar && event.detail.lengthComputable) {
      bar.value = Math.round((event.detail.loaded / event.detail.total) * 100);
    }
  });

  // A failed upload is a row per file in the dialog, in plain words: the server sends those
  // rows with its error status; anything refused before it looked (a body over the size
  // limit, a proxy, no connection) gets them here.
  var UPLOAD_FAILURES = {
    0: "The server could not be reached, so the files were not uploaded. Try again.",
    413: "The files are too large to upload at once: send fewer or smaller files.",
    507: "The server's disk is full, so nothing was stored. Try again later.",
  };
  function uploadFailed(status) {
    var rows = $("#upload-rows"), input = $("#upload-input");
    if (!rows) { return; }
    var names = input && input.files.length ? Array.prototype.map.call(input.files, function (f) { return f.name; }) : ["Upload"];
    var reason = UPLOAD_FAILURES[status] || "The upload failed (error " + status + "). Try again.";
    names.slice().reverse().forEach(function (name) {
      var row = document.createElement("li");
      row.className = "upload-row";
      row.dataset.status = "failed";
      [["filename", name], ["status status-failed", "failed"], ["reason", reason]].forEach(function (part, index) {
        var span = document.createElement("span");
        span.className = part[0];
        span.textContent = part[1];
        if (index) { row.appendChild(document.createTextNode(" ")); }
        row.appendChild(span);
      });
      rows.insertBefore(row, rows.firstChild);
    });
  }
  document.addEventListener("htmx:beforeSwap", function (event) {
    var form = event.detail.requestConfig && event.detail.requestConfig.elt;  // elt: the target
    if (!form || form.id !== "upload-form" || event.detail.xhr.status < 400) { return; }
    var response = event.detail.xhr.responseText || "";
    event.detail.shouldSwap = response.indexOf("upload-row") !== -1;  // the server's rows
    if (!event.detail.shouldSwap) { uploadFailed(event.detail.xhr.status); }
    event.detail.isError = false;  // told in the rows: no toast, no console error
  });
  document.addEventListener("htmx:sendError", function (event) {
    if (event.detail.elt.id === "upload-form") { uploadFailed(0); }
  });

  // Errors from htmx requests: the server sends an escaped _error.html partial.
  document.addEventListener("htmx:responseError", function (event) {
    var toast = $("#toast");
    if (event.detail.elt.hasAttribute("data-quiet-errors")) { return; }  // e.g. Stop after the end
    // In a modal dialog (Share), the error is said in the dialog: a toast would be under it.
    var dialog = event.detail.elt.closest && event.detail.elt.closest("dialog[open]");
    var slot = dialog && dialog.querySelector("[data-dialog-error]");
    if (slot) { htmx.swap(slot, event.detail.xhr.responseText, { swapStyle: "innerHTML" }); return; }
    if (!toast) { return; }
    htmx.swap(toast, event.detail.xhr.responseText, { swapStyle: "innerHTML" });
    toast.classList.add("visible");
    window.setTimeout(function () { toast.classList.remove("visible"); }, 6000);
  });

  // Files dragged over the window: an overlay says where they go; dropped, they go to the
  // upload dialog (into the collection on show, or the question's scope when it is one
  // collection the caller may write to) and are sent at once.
  var dragDepth = 0;
  function carriesFiles(event) {
    return event.dataTransfer && Array.prototype.indexOf.call(event.dataTransfer.types || [], "Files") !== -1;
  }
  function dropCollection() {
    var select = $("#upload-collection"), scope = $("#scope-input");
    if (!select) { return null; }
    if (!document.querySelector(".collection-view") && scope && /^[0-9]+$/.test(scope.value) &&
        select.querySelector("option[value='" + scope.value + "']")) {
      select.value = scope.value;
    }
    return select.options[select.selectedIndex];
  }
  function showDropOverlay(show) {
    var overlay = $("#drop-overlay");
    if (!overlay) { return; }
    if (show) {
      var option = dropCollection();
      $("#drop-target").textContent = option ? "Into the collection “" + option.textContent.trim() + "”." : "";
    }
    overlay.hidden = !show;
  }
  window.addEventListener("dragenter", function (event) {
    if (!carriesFiles(event) || !$("#upload-input")) { return; }
    dragDepth++;
    showDropOverlay(true);
  });
  window.addEventListener("dragleave", function (event) {
    if (!carriesFiles(event)) { return; }
    dragDepth = Math.max(0, dragDepth - 1);
    if (!dragDepth) { showDropOverlay(false); }
  });
  window.addEventListener("dragover", function (event) { event.preventDefault(); });
  window.addEventListener("drop", function (event) {
    event.preventDefault();
    dragDepth = 0;
    showDropOverlay(false);
    var input = $("#upload-input");
    if (!input || !event.dataTransfer || !event.dataTransfer.files.length) { return; }
    dropCollection();
    input.files = event.dataTransfer.files;
    var dialog = document.getElementById("upload-dialog");
    if (!dialog.open) { dialog.showModal(); }
    htmx.trigger("#upload-form", "submit");
  });

  // Code blocks in answers get a Copy button (added here: answers hold no script or buttons).
  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) { return navigator.clipboard.writeText(text); }
    var area = document.createElement("textarea");  // plain-http fallback
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.appendChild(area);
    area.select();
    var copied = document.execCommand("copy");
    area.remove();
    return copied ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }
  function addCopyButtons(root) {
    var blocks = (root.querySelectorAll ? root : document).querySelectorAll(".markdown pre");
    Array.prototype.forEach.call(blocks, function (pre) {
      if (pre.querySelector(".copy-code")) { return; }
      var button = document.createElement("button");
      button.type = "button";
      button.className = "copy-code";
      button.textContent = "Copy";
      button.setAttribute("aria-label", "Copy code");
      pre.appendChild(button);
    });
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest(".copy-code");
    if (!button) { return; }
    var code = button.parentElement.querySelector("code");
    copyText(code ? code.textContent : "").then(
      function () { button.textContent = "Copied"; },
      function () { button.textContent = "Copy failed"; }
    );
    window.setTimeout(function () { button.textContent = "Copy"; }, 2000);
  });
  htmx.onLoad(addCopyButtons);

  // Theme: automatic (the system's), then the opposite, then the same as the system, then
  // automatic again, so the first click always changes what you see. Stored in localStorage;
  // static/theme.js applies it before the first paint.
  var THEME_KEY = "ragdesk.theme";
  var systemDark = window.matchMedia("(prefers-color-scheme: dark)");
  function storedTheme() { return document.documentElement.dataset.theme || "auto"; }
  function systemTheme() { return systemDark.matches ? "dark" : "light"; }
  function showTheme() {
    var button = $("#theme-toggle");
    if (!button) { return; }
    var mode = storedTheme();
    var shown = mode === "auto" ? systemTheme() : mode;
    button.textContent = (shown === "dark" ? "☾ " : "☀ ") + (mode === "auto" ? "Auto" : mode === "dark" ? "Dark" : "Light");
    button.dataset.mode = mode;
  }
  function setTheme(mode) {
    try {
      if (mode === "auto") { window.localStorage.removeItem(THEME_KEY); }
      else { window.localStorage.setItem(THEME_KEY, mode); }
    } catch (error) { /* storage disabled: the choice lasts for this page only */ }
    if (mode === "auto") { delete document.documentElement.dataset.theme; }
    else { document.documentElement.dataset.theme = mode; }
    showTheme();
  }
  function nextTheme() {
    var mode = storedTheme();
    var opposite = systemTheme() === "dark" ? "light" : "dark";
    if (mode === "auto") { return opposite; }
    return mode === opposite ? systemTheme() : "auto";
  }
  document.addEventListener("click", function (event) {
    if (event.target.closest("#theme-toggle")) { setTheme(nextTheme()); }
  });
  systemDark.addEventListener("change", showTheme);
  document.addEventListener("DOMContentLoaded", showTheme);

  // The document viewer scrolls the cited passage into view, in the text and on the page.
  document.addEventListener("DOMContentLoaded", function () {
    var passage = document.getElementById("passage");
    if (passage) { passage.scrollIntoView({ block: "center" }); }
    var image = document.querySelector("#page-image img");
    var box = document.querySelector("#page-image .page-boxes rect");
    if (!image || !box) { return; }
    function showBox() {
      var figure = document.getElementById("page-image");
      var top = parseFloat(box.getAttribute("y")) * image.clientHeight;
      figure.scrollTop = Math.max(0, top - figure.clientHeight / 3);
    }
    if (image.complete) { showBox(); } else { image.addEventListener("load", showBox); }
  });
})();
