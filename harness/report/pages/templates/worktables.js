// Tables a reader can work, from file:// with nothing fetched: a click on a heading sorts its
// table (numbers as numbers; a table grouped in several bodies, within each group), and the bar
// above, on a page that has one, filters every table.work by GPU, version, technique and
// outcome. Without scripts every row stays visible.
(function () {
  var KEYS = ["gpu", "version", "technique", "outcome"];
  var bar = document.getElementById("filters");
  var marked = document.querySelectorAll("table.work [data-gpu], table.work[data-gpu], table.work tbody tr");
  var sections = document.querySelectorAll("details[data-gpu]");
  var arrived = Array.prototype.map.call(sections, function (d) { return d.open; });
  if (bar && marked.length) filters();
  sorting();
  function own(el, k) {  // a row or cell's value, else its table's (a headline table is one GPU)
    var v = el.getAttribute("data-" + k);
    if (v === null) { var t = el.closest("table"); v = t && t.getAttribute("data-" + k); }
    return v;
  }
  function vals(el, k) { var v = own(el, k); return v === null ? null : (k === "outcome" ? v.split(" ") : [v]); }
  function filters() {
    KEYS.forEach(function (k) {
      var seen = {};
      marked.forEach(function (el) { (vals(el, k) || []).forEach(function (v) { if (v) seen[v] = 1; }); });
      var names = Object.keys(seen).sort();
      if (!names.length) return;
      var label = document.createElement("label"), sel = document.createElement("select");
      sel.id = "filter-" + k; sel.add(new Option("any " + k, ""));
      names.forEach(function (v) { sel.add(new Option(v, v)); });
      sel.addEventListener("change", apply);
      label.append(k + " ", sel); bar.append(label, " ");
    });
  }
  function picked(k) { var s = document.getElementById("filter-" + k); return s ? s.value : ""; }
  function fits(el, keys) {
    return keys.every(function (k) { var p = picked(k), v = vals(el, k); return !p || v === null || v.indexOf(p) >= 0; });
  }
  function apply() {
    document.querySelectorAll("table.work tbody tr:not(.group)").forEach(function (tr) { tr.hidden = !fits(tr, KEYS); });
    document.querySelectorAll("table.work tr.group").forEach(function (g) {  // a group's heading goes with its last line
      g.hidden = !g.parentNode.querySelector("tr:not(.group):not([hidden])");
    });
    document.querySelectorAll("table.work th[data-gpu], table.work td[data-gpu]").forEach(function (c) {
      c.hidden = !fits(c, ["gpu", "version"]);
    });
    sections.forEach(function (d, i) {  // a GPU picked opens its own section only; none, the sections as they came
      d.open = picked("gpu") || picked("version") ? fits(d, ["gpu", "version"]) : arrived[i];
    });
  }
  function key(td) {
    var text = td ? td.innerText.trim() : "", n = parseFloat(text.replace(/,/g, ""));
    return isNaN(n) ? text : n;
  }
  function sorting() {
    document.querySelectorAll("table.work thead th").forEach(function (th, i) {
      th.classList.add("sortable");
      th.addEventListener("click", function () {
        var down = th.getAttribute("aria-sort") === "ascending";
        Array.prototype.forEach.call(th.closest("table").tBodies, function (body) { sortBody(body, i, down); });
        th.parentNode.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", down ? "descending" : "ascending");
      });
    });
  }
  function sortBody(body, i, down) {  // within its group: a group's heading stays on top
    var rows = Array.prototype.filter.call(body.rows, function (r) { return !r.classList.contains("group"); });
    rows.sort(function (a, b) {
      var x = key(a.cells[i]), y = key(b.cells[i]);
      if (typeof x !== typeof y) return typeof x === "number" ? -1 : 1;  // a dash stays below the figures
      var c = x < y ? -1 : x > y ? 1 : 0;
      return down ? -c : c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
})();
