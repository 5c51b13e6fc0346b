// Live updates for the Kalypso fleet dashboard.
//
// The server sends the data version on /events (server-sent events). When it differs from
// the version the page was rendered at, the page is fetched again and its #live part is
// swapped in place: filters, focus and scroll position stay where they are. Without
// JavaScript the pages are complete; they only do not update themselves.
(function () {
  "use strict";
  var body = document.body;
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!body || !live || !window.EventSource || !body.dataset.version) {
    return;
  }
  var version = body.dataset.version;
  var busy = false;
  var again = false;

  function say(text, state) {
    if (status) {
      status.textContent = text;
      status.dataset.state = state;
    }
  }

  function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    fetch(window.location.href, { headers: { Accept: "text/html" }, cache: "no-store" })
      .then(function (response) {
        if (response.status === 404) {
          // What this page shows is gone (a cluster was removed): show the 404 page.
          window.location.reload();
        }
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        var next = new DOMParser().parseFromString(html, "text/html");
        var fresh = next.getElementById("live");
        var current = document.getElementById("live");
        if (fresh && current) {
          // Keep the keyboard focus on the same link or control if it is in the swapped part.
          var active = document.activeElement;
          var href = active && current.contains(active) ? active.getAttribute("href") : null;
          current.replaceWith(document.adoptNode(fresh));
          if (href) {
            var links = fresh.querySelectorAll("a[href]");
            for (var i = 0; i < links.length; i++) {
              if (links[i].getAttribute("href") === href) {
                links[i].focus({ preventScroll: true });
                break;
              }
            }
          }
        }
        if (next.body && next.body.dataset.version) {
          body.dataset.version = next.body.dataset.version;
        }
        say("Updated " + new Date().toLocaleTimeString(), "ok");
      })
      .catch(function () {
        say("Update failed; retrying", "error");
        window.setTimeout(refresh, 5000);
      })
      .then(function () {
        busy = false;
        if (again) {
          again = false;
          refresh();
        }
      });
  }

  var events = new EventSource("/events");
  events.addEventListener("version", function (event) {
    say("Live", "ok");
    if (event.data !== version) {
      version = event.data;
      refresh();
    }
  });
  events.onerror = function () {
    say("Reconnecting…", "error");
  };
})();
