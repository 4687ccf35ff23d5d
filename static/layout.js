// The desktop shell: resizable panes, menus, pane toggles, the selected collection,
// citations that select their source in the inspector, and the connection state.
(function () {
  "use strict";
  var root = document.documentElement;
  var LIMITS = { sidebar: [180, 600], inspector: [200, 700] };

  function store(key, value) {
    try {
      if (value === null) { window.localStorage.removeItem("ragdesk." + key); }
      else { window.localStorage.setItem("ragdesk." + key, value); }
    } catch (error) { /* storage disabled: this page only */ }
  }
  function stored(key) {
    try { return window.localStorage.getItem("ragdesk." + key); } catch (error) { return null; }
  }

  // --- Resizable panes: drag a divider, or focus it and use the arrow keys -------------
  function paneWidth(pane) { return document.getElementById(pane).getBoundingClientRect().width; }
  function setWidth(pane, width, save) {
    var limits = LIMITS[pane];
    // Never squeeze the chat below 360 px, whatever the window size.
    var other = pane === "sidebar" ? "inspector" : "sidebar";
    var room = window.innerWidth - 360 - (root.dataset[other] === "hidden" ? 0 : paneWidth(other));
    var clamped = Math.round(Math.max(limits[0], Math.min(limits[1], room, width)));
    root.style.setProperty("--" + pane + "-width", clamped + "px");
    var splitter = document.querySelector(".splitter[data-pane=" + pane + "]");
    if (splitter) { splitter.setAttribute("aria-valuenow", String(clamped)); }
    if (save) { store(pane + "Width", String(clamped)); }
  }
  document.addEventListener("pointerdown", function (event) {
    var splitter = event.target.closest(".splitter");
    if (!splitter || event.button !== 0) { return; }
    event.preventDefault();
    var pane = splitter.dataset.pane;
    var startX = event.clientX, startWidth = paneWidth(pane);
    var sign = pane === "sidebar" ? 1 : -1;
    splitter.setPointerCapture(event.pointerId);
    root.classList.add("resizing");
    function move(e) { setWidth(pane, startWidth + sign * (e.clientX - startX), false); }
    function up() {
      splitter.removeEventListener("pointermove", move);
      splitter.removeEventListener("pointerup", up);
      root.classList.remove("resizing");
      setWidth(pane, paneWidth(pane), true);
    }
    splitter.addEventListener("pointermove", move);
    splitter.addEventListener("pointerup", up);
  });
  document.addEventListener("keydown", function (event) {
    var splitter = event.target.closest && event.target.closest(".splitter");
    if (!splitter) { return; }
    var pane = splitter.dataset.pane, sign = pane === "sidebar" ? 1 : -1;
    var step = event.shiftKey ? 60 : 20;
    var delta = { ArrowLeft: -step * sign, ArrowRight: step * sign }[event.key];
    if (event.key === "Home") { setWidth(pane, LIMITS[pane][0], true); }
    else if (event.key === "End") { setWidth(pane, LIMITS[pane][1], true); }
    else if (delta) { setWidth(pane, paneWidth(pane) + delta, true); }
    else { return; }
    event.preventDefault();
  });
  function syncSplitters() {
    ["sidebar", "inspector"].forEach(function (pane) {
      var splitter = document.querySelector(".splitter[data-pane=" + pane + "]");
      var element = document.getElementById(pane);
      if (splitter && element) { splitter.setAttribute("aria-valuenow", String(Math.round(paneWidth(pane)))); }
    });
  }

  // --- Narrow windows (below 1024 px): the panes are drawers, closed until asked for -------
  var NARROW = window.matchMedia("(max-width: 1023.98px)");
  function narrow() { return NARROW.matches; }
  function setDrawer(pane) {
    var open = root.dataset.drawer;
    if (pane) { root.dataset.drawer = pane; } else { delete root.dataset.drawer; }
    document.querySelectorAll("[data-drawer]").forEach(function (b) {
      b.setAttribute("aria-expanded", b.dataset.drawer === pane ? "true" : "false");
    });
    var backdrop = document.getElementById("drawer-backdrop");
    if (backdrop) { backdrop.hidden = !pane; }
    if (pane) {
      var first = document.getElementById(pane).querySelector("input, a[href], button:not([disabled])");
      if (first && pane === "sidebar") { first.focus({ preventScroll: true }); }
    } else if (open) {
      var opener = document.querySelector("[data-drawer=" + open + "]");
      if (opener && document.activeElement && document.getElementById(open).contains(document.activeElement)) { opener.focus(); }
    }
  }
  function toggleDrawer(pane) { setDrawer(root.dataset.drawer === pane ? null : pane); }
  window.ragdeskShowDrawer = function (pane) { if (narrow()) { setDrawer(pane); } };
  document.addEventListener("click", function (event) {
    var toggle = event.target.closest("[data-drawer]");
    if (toggle) { toggleDrawer(toggle.dataset.drawer); return; }
    if (event.target.closest("[data-close-drawer]")) { setDrawer(null); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && root.dataset.drawer && !document.querySelector("dialog[open]")) {
      event.preventDefault();
      setDrawer(null);
    }
  });
  NARROW.addEventListener("change", function () { if (!narrow()) { setDrawer(null); } });

  // --- Showing and hiding panes ----------------------------------------------------------
  function togglePane(pane) {
    if (narrow()) { toggleDrawer(pane); return; }
    var hidden = root.dataset[pane] !== "hidden";
    if (hidden) { root.dataset[pane] = "hidden"; } else { delete root.dataset[pane]; }
    store(pane + "Hidden", hidden ? "1" : null);
    document.querySelectorAll("[data-toggle-pane=" + pane + "]").forEach(function (b) {
      b.setAttribute("aria-checked", hidden ? "false" : "true");
    });
  }
  window.ragdeskTogglePane = togglePane;

  // --- Menus (menu button pattern: Enter/Space/ArrowDown open, arrows move, Esc closes) ---
  function items(menu) { return Array.prototype.slice.call(menu.querySelectorAll("[role^=menuitem]:not([disabled])")); }
  function openMenu(button, focusLast) {
    closeMenus(button);
    var menu = document.getElementById(button.getAttribute("aria-controls"));
    menu.hidden = false;
    button.setAttribute("aria-expanded", "true");
    var list = items(menu);
    if (list.length) { list[focusLast ? list.length - 1 : 0].focus(); }
  }
  function closeMenus(except) {
    document.querySelectorAll(".menu-button[aria-expanded=true]").forEach(function (button) {
      if (button === except) { return; }
      button.setAttribute("aria-expanded", "false");
      document.getElementById(button.getAttribute("aria-controls")).hidden = true;
    });
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest(".menu-button");
    if (button) {
      if (button.getAttribute("aria-expanded") === "true") { closeMenus(); } else { openMenu(button, false); }
      return;
    }
    var item = event.target.closest("[role^=menuitem]");
    if (item || !event.target.closest("[role=menu]")) { closeMenus(); }
    var action = event.target.closest("[data-action]");
    if (action && ACTIONS[action.dataset.action]) { ACTIONS[action.dataset.action](event); }
    var toggle = event.target.closest("[data-toggle-pane]");
    if (toggle) { togglePane(toggle.dataset.togglePane); }
  });
  document.addEventListener("keydown", function (event) {
    var button = event.target.closest && event.target.closest(".menu-button");
    if (button && (event.key === "ArrowDown" || event.key === "ArrowUp")) {
      event.preventDefault();
      openMenu(button, event.key === "ArrowUp");
      return;
    }
    var menu = event.target.closest && event.target.closest("[role=menu]");
    if (!menu) { return; }
    var list = items(menu), index = list.indexOf(event.target);
    var opener = document.querySelector("[aria-controls=" + menu.id + "]");
    var buttons = Array.prototype.slice.call(document.querySelectorAll(".menu-button"));
    if (event.key === "ArrowDown") { list[(index + 1) % list.length].focus(); }
    else if (event.key === "ArrowUp") { list[(index - 1 + list.length) % list.length].focus(); }
    else if (event.key === "Home") { list[0].focus(); }
    else if (event.key === "End") { list[list.length - 1].focus(); }
    else if (event.key === "Escape" || event.key === "Tab") {
      closeMenus();
      if (event.key === "Escape") { opener.focus(); }
      else { return; }
    } else if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
      var next = buttons[(buttons.indexOf(opener) + (event.key === "ArrowRight" ? 1 : buttons.length - 1)) % buttons.length];
      openMenu(next, false);
    } else { return; }
    event.preventDefault();
    event.stopPropagation();
  }, true);

  function openDialog(id) {
    var dialog = document.getElementById(id);
    if (dialog && !dialog.open && !document.querySelector("dialog[open]")) { dialog.showModal(); }
  }
  var ACTIONS = {
    "upload": function () { openDialog("upload-dialog"); },
    "help": function () { openDialog("help-dialog"); },
    "about": function () { openDialog("about-dialog"); },
    "theme": function () { var b = document.getElementById("theme-toggle"); if (b) { b.click(); } },
  };
  window.ragdeskOpenDialog = openDialog;

  // --- The collection whose table is on show is selected in the sidebar (only there: what a
  // question searches is the composer's scope, not this) ------------------------------------
  function markCollection() {
    var view = document.querySelector(".collection-view");
    var id = view ? view.dataset.collection : null;
    if (id) { store("collection", id); }
    document.querySelectorAll("[data-collection-link]").forEach(function (link) {
      var selected = link.dataset.collectionLink === id;
      link.closest(".list-item").classList.toggle("selected", selected);
      if (selected) { link.setAttribute("aria-current", "page"); } else { link.removeAttribute("aria-current"); }
    });
  }

  // --- A citation [n] selects its source in the inspector (the link still opens the page) --
  function selectSource(messageId, number) {
    var target = document.getElementById("source-" + messageId + "-" + number);
    document.querySelectorAll(".source.selected").forEach(function (s) { s.classList.remove("selected"); });
    if (!target) { return false; }
    target.classList.add("selected");
    target.scrollIntoView({ block: "nearest" });
    if (narrow()) { setDrawer("inspector"); }
    else if (root.dataset.inspector === "hidden") { togglePane("inspector"); }
    return true;
  }
  function selectAnswer(article) {
    document.querySelectorAll("article.msg.selected").forEach(function (a) { a.classList.remove("selected"); });
    article.classList.add("selected");
  }
  // A cited passage opens in the inspector inside its page's text, not in a new tab (a
  // modified click, or "Open in full" there, still opens the page viewer).
  function passageUrl(href) {
    var url = new URL(href, window.location.href);
    var match = url.pathname.match(/^\/documents\/(\d+)\/pages\/(\d+)$/);
    return match ? "/ui/documents/" + match[1] + "/pages/" + match[2] + "/passage" + url.search : null;
  }
  function showPassage(href) {
    var url = passageUrl(href);
    if (!url) { return false; }
    htmx.ajax("GET", url, { source: "#passage-view", target: "#passage-view", swap: "innerHTML" }).then(function () {
      var page = document.getElementById("passage-page"), mark = document.getElementById("passage");
      if (page && mark) { page.scrollTop = Math.max(0, mark.offsetTop - page.offsetTop - page.clientHeight / 3); }
    });
    if (narrow()) { setDrawer("inspector"); }
    else if (root.dataset.inspector === "hidden") { togglePane("inspector"); }
    return true;
  }
  function plainClick(event) { return event.button === 0 && !event.ctrlKey && !event.metaKey && !event.shiftKey && !event.altKey; }
  document.addEventListener("click", function (event) {
    var cite = event.target.closest("a.cite");
    var article = event.target.closest("article.msg.assistant[data-message]");
    if (!article) { return; }
    selectAnswer(article);
    if (!cite) { return; }
    if (plainClick(event) && showPassage(cite.getAttribute("href"))) { event.preventDefault(); }
    var messageId = article.dataset.message, number = cite.textContent.replace(/[^0-9]/g, "");
    if (selectSource(messageId, number)) { return; }
    htmx.ajax("GET", "/ui/messages/" + messageId + "/sources", { source: "#sources-pane", target: "#sources-pane" }).then(function () {
      selectSource(messageId, number);
    });
  });
  document.addEventListener("click", function (event) {
    var link = event.target.closest("a[data-passage]");
    if (link && plainClick(event) && showPassage(link.getAttribute("href"))) { event.preventDefault(); }
    var close = event.target.closest("[data-close-passage]");
    if (close) { document.getElementById("passage-view").innerHTML = ""; }
  });

  // --- Edit and resend a question ---------------------------------------------------------
  document.addEventListener("click", function (event) {
    var edit = event.target.closest("[data-edit]");
    var cancel = event.target.closest("[data-cancel-edit]");
    var id = edit ? edit.dataset.edit : cancel ? cancel.dataset.cancelEdit : null;
    if (!id) { return; }
    var form = document.getElementById("edit-" + id);
    form.hidden = !edit;
    var button = document.querySelector("[data-edit='" + id + "']");
    button.setAttribute("aria-expanded", edit ? "true" : "false");
    if (edit) { form.querySelector("textarea").focus(); } else { button.focus(); }
  });

  // --- Rename: close the dialog once the server took the new title -----------------------
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.elt.id === "rename-form" && event.detail.successful) {
      document.getElementById("rename-dialog").close();
      var title = document.getElementById("rename-input").value.trim();
      if (title) { document.title = title + " — Ragdesk"; }
    }
  });

  // --- Connection state: the status bar polls; a failed poll means we are offline --------
  function connection(online) {
    var element = document.getElementById("connection");
    if (!element || element.dataset.state === (online ? "online" : "offline")) { return; }
    element.dataset.state = online ? "online" : "offline";
    element.querySelector(".dot").className = "dot " + (online ? "ok" : "bad");
    element.querySelector(".connection-text").textContent = online ? "Connected" : "Offline: retrying…";
  }
  document.addEventListener("htmx:sendError", function () { connection(false); });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.xhr && event.detail.xhr.status > 0) { connection(true); }
  });
  window.addEventListener("offline", function () { connection(false); });

  // --- Keep the keyboard focus on a control that a swap replaced (Pin, a column's sort) ----
  var focusedId = null;
  document.addEventListener("htmx:beforeSwap", function () {
    focusedId = document.activeElement && document.activeElement.id ? document.activeElement.id : null;
  });
  document.addEventListener("htmx:afterSettle", function () {
    if (!focusedId || (document.activeElement && document.activeElement !== document.body)) { return; }
    var again = document.getElementById(focusedId);
    if (again && !document.querySelector("dialog[open]")) { again.focus(); }
    focusedId = null;
  });

  document.addEventListener("DOMContentLoaded", function () {
    markCollection();
    syncSplitters();
    ["sidebar", "inspector"].forEach(function (pane) {
      document.querySelectorAll("[data-toggle-pane=" + pane + "]").forEach(function (b) {
        b.setAttribute("aria-checked", root.dataset[pane] === "hidden" ? "false" : "true");
      });
    });
  });
  document.addEventListener("htmx:afterSettle", markCollection);
})();
