/// The console's only two assets, served by the edge itself (the CSP allows nothing else).
enum ConsoleAssets {
    /// System fonts, contrast of at least 4.5:1 for text, visible focus, tables that scroll
    /// sideways on a phone instead of overflowing the page.
    static let css = #"""
        :root { --fg: #1b1f24; --muted: #4a5360; --bg: #ffffff; --panel: #f4f6f8; --line: #d0d7de; --accent: #0b5cad;
          --ok: #1a7f37; --bad: #b42318; --warn: #8a5a00; font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
        * { box-sizing: border-box; }
        body { margin: 0; color: var(--fg); background: var(--bg); line-height: 1.45; }
        a { color: var(--accent); }
        a:focus, button:focus, input:focus, select:focus, textarea:focus, summary:focus { outline: 3px solid #f5a623; outline-offset: 2px; }
        .skip { position: absolute; left: -999px; } .skip:focus { left: 8px; top: 8px; background: #fff; padding: 4px; z-index: 2; }
        .sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
        header.top { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; padding: 10px 16px; background: #0d1b2a; color: #fff; }
        header.top a { color: #fff; text-decoration: none; } header.top nav { display: flex; gap: 12px; flex: 1; }
        .brand { font-weight: 700; font-size: 1.15rem; }
        .signout { display: flex; gap: 8px; align-items: center; margin: 0; } .who { opacity: .9; }
        .hubnav { display: flex; flex-wrap: wrap; gap: 4px 16px; padding: 8px 16px; background: var(--panel); border-bottom: 1px solid var(--line); }
        .hubnav a:first-child { font-weight: 700; }
        main { padding: 16px; max-width: 1200px; margin: 0 auto; }
        h1 { font-size: 1.5rem; margin-top: 0; } h2 { font-size: 1.2rem; }
        h1, h2, p, li { overflow-wrap: anywhere; }
        .scroll { overflow-x: auto; margin-bottom: 16px; position: relative; }
        table { border-collapse: collapse; width: 100%; font-size: .92rem; }
        caption { text-align: left; font-weight: 600; padding: 4px 0; color: var(--muted); }
        th, td { text-align: left; padding: 6px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
        thead th { background: var(--panel); }
        td.handle code, .handle code { word-break: break-all; }
        tr.expired td { color: var(--muted); }
        code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .88rem; }
        pre { background: var(--panel); border: 1px solid var(--line); padding: 8px; overflow-x: auto; white-space: pre-wrap; word-break: break-word; }
        .card { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 16px; max-width: 560px; display: grid; grid-template-columns: minmax(0, 1fr); gap: 6px; }
        .card.send { max-width: 760px; }
        fieldset { border: 1px solid var(--line); display: grid; grid-template-columns: minmax(0, 1fr); gap: 6px; margin: 0 0 8px; min-width: 0; } legend { font-weight: 600; }
        label { font-weight: 600; margin-top: 4px; }
        input, select, textarea { max-width: 100%; }
        input, select, textarea, button { font: inherit; padding: 6px 8px; border: 1px solid #8c959f; border-radius: 4px; background: #fff; color: var(--fg); }
        button { cursor: pointer; background: #fff; } button.primary, .card > button { background: var(--accent); color: #fff; border-color: var(--accent); }
        .buttons { display: flex; gap: 8px; flex-wrap: wrap; }
        button.danger, .card > button.danger { background: #fff; color: var(--bad); border-color: var(--bad); }
        form.inline { display: inline; margin: 0 0 0 6px; } ul.keys li { margin-bottom: 6px; }
        details.card { margin-bottom: 8px; } details.card summary { cursor: pointer; font-weight: 600; }
        fieldset label { font-weight: 400; }
        .filters { display: flex; flex-wrap: wrap; gap: 8px 12px; align-items: end; margin-bottom: 12px; }
        .filters div { display: grid; gap: 2px; }
        .error { color: var(--bad); font-weight: 600; } .notice { color: var(--warn); font-weight: 600; }
        .hint { color: var(--muted); font-size: .9rem; }
        .badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: .82rem; font-weight: 600; background: #eaeef2; color: var(--fg); }
        .badge.set, .badge.Completed { background: #dafbe1; color: var(--ok); }
        .badge.missing, .badge.failing, .badge.Abandoned { background: #ffebe9; color: var(--bad); }
        .badge.inbox, .badge.Enqueued, .badge.Processing, .badge.Scheduled { background: #fff8c5; color: var(--warn); }
        .chart { width: 100%; max-width: 720px; height: auto; background: #fff; border: 1px solid var(--line); }
        .chart .axis { stroke: var(--muted); stroke-width: 1; } .chart .label { font-size: 11px; fill: var(--muted); }
        .chart .delivered, .swatch.delivered { fill: var(--ok); background: var(--ok); }
        .chart .failed, .swatch.failed { fill: var(--bad); background: var(--bad); }
        .legend { list-style: none; display: flex; gap: 16px; padding: 0; } .swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; }
        .entry { border-bottom: 1px solid var(--line); padding-bottom: 8px; margin-bottom: 8px; } .entry h2 { margin-bottom: 0; }
        @media (max-width: 600px) { main { padding: 10px; } header.top nav { order: 3; flex-basis: 100%; } th, td { padding: 4px 6px; } }
        """#

    /// Progressive enhancement only: every page works without it. On a send's page that is still
    /// under way, it fetches the same page once a second and swaps in its outcome section until the
    /// state is final. Same origin only (the CSP's connect-src).
    static let js = #"""
        "use strict";
        (function () {
          var section = document.getElementById("outcome");
          if (!section || !section.hasAttribute("data-live")) return;
          var started = Date.now();
          function poll() {
            fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
              .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
              .then(function (html) {
                var next = new DOMParser().parseFromString(html, "text/html").getElementById("outcome");
                if (!next) return;
                section.replaceWith(next);
                section = next;
                if (next.hasAttribute("data-live") && Date.now() - started < 600000) window.setTimeout(poll, 1000);
              })
              .catch(function () { window.setTimeout(poll, 5000); });
          }
          window.setTimeout(poll, 1000);
        })();
        """#
}
