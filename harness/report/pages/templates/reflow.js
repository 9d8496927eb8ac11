// On a narrow screen style.css stacks each table row's cells, one under the other, so that no
// table is wider than the screen and no value breaks inside a word; each cell then carries its
// column's heading as a label, read here from the table's heading row (a row of headings only).
(function () {
  var every = function (list, f) { return Array.prototype.every.call(list, f); };
  document.querySelectorAll("table").forEach(function (t) {
    var head = Array.prototype.filter.call(t.rows, function (r) {
      return r.cells.length > 1 && every(r.cells, function (c) { return c.tagName === "TH"; });
    })[0];
    t.classList.add("reflow");
    if (!head) return;
    head.classList.add("head");
    var names = [];
    Array.prototype.forEach.call(head.cells, function (c) {
      for (var i = 0; i < c.colSpan; i++) names.push(c.textContent.trim().replace(/\s+/g, " "));
    });
    Array.prototype.forEach.call(t.rows, function (r) {
      if (r === head) return;
      var col = 0;
      Array.prototype.forEach.call(r.cells, function (c) {
        if (names[col] && r.cells.length > 1) c.setAttribute("data-label", names[col]);
        col += c.colSpan;
      });
    });
  });
})();
