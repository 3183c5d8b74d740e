(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("checkout-data").textContent);
  var body = document.body;
  var statusText = document.getElementById("status-text");
  var paidNote = document.getElementById("paid-note");
  var expiry = document.getElementById("expiry");
  var copyButton = document.getElementById("copy");
  var invoice = document.getElementById("invoice");
  var LABELS = {
    unpaid: "Waiting for payment",
    paid: "Paid",
    spent: "Paid · used",
    refunded: "Paid · refunded",
    expired: "Expired"
  };
  var current = data.status;

  function stateClass(status) {
    if (status === "paid" || status === "spent") return "paid";
    if (status === "unpaid") return "waiting";
    return status;
  }

  function render(status) {
    current = status;
    statusText.textContent = LABELS[status] || status;
    body.className = "state-" + stateClass(status);
    paidNote.hidden = !(status === "paid" || status === "spent");
    if (status !== "unpaid") expiry.textContent = "";
  }

  function settled(status) {
    return status !== "unpaid";
  }

  // Long poll: the server answers at once on settlement, or after `wait` seconds.
  function poll() {
    fetch(data.statusUrl + "?wait=25", { cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (s) {
        render(s.status);
        if (!settled(s.status)) poll();
      })
      .catch(function () { setTimeout(poll, 2000); });
  }

  function tick() {
    if (current !== "unpaid") return;
    var left = Math.max(0, Math.round(data.expiresAt - Date.now() / 1000));
    if (left === 0) { render("expired"); return; }
    var m = Math.floor(left / 60), s = left % 60;
    expiry.textContent = "Expires in " + m + ":" + (s < 10 ? "0" : "") + s;
    setTimeout(tick, 1000);
  }

  copyButton.addEventListener("click", function () {
    var done = function () {
      copyButton.textContent = "Copied";
      setTimeout(function () { copyButton.textContent = "Copy invoice"; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(data.invoice).then(done, function () { fallback(); done(); });
    } else {
      fallback();
      done();
    }
    function fallback() {
      invoice.focus();
      invoice.select();
      try { document.execCommand("copy"); } catch (e) { /* selection stays for manual copy */ }
    }
  });

  render(current);
  if (!settled(current)) { tick(); poll(); }
})();
