/// The console's Mustache templates. They live in the binary, not in files beside it, so that an
/// edge deployed as one executable (the image, `herald up`) serves its console without a resource
/// folder to copy. `{{x}}` escapes HTML; `{{{x}}}` is used only for markup the edge made itself
/// (the layout's content and the chart's SVG).
enum ConsoleTemplates {
    static let all: [String: String] = [
        "layout": layout, "login": login, "error": error, "hubs": hubs, "hub": hub, "devices": devices, "send": send,
        "sends": sends, "outcome": outcome, "inbox": inbox, "secret": secret,
    ]

    static let layout = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>{{title}} · Herald console</title>
        <link rel="icon" href="data:,">
        <link rel="stylesheet" href="/console/assets/console.css">
        <script src="/console/assets/console.js" defer></script>
        </head>
        <body>
        <a class="skip" href="#main">Skip to content</a>
        <header class="top">
          <a class="brand" href="/console/hubs">Herald</a>
          {{#session}}
          <nav aria-label="Console">
            <a href="/console/hubs">Hubs</a>
            {{#admin}}<a href="/console/inbox">Inbox</a>{{/admin}}
          </nav>
          <form class="signout" method="post" action="/console/logout">
            <input type="hidden" name="_csrf" value="{{csrf}}">
            <span class="who">{{user}}</span>
            <button type="submit">Sign out</button>
          </form>
          {{/session}}
        </header>
        {{#hub}}
        <nav class="hubnav" aria-label="Hub {{name}}">
          <a href="{{path}}">{{name}}</a>
          <a href="{{path}}/devices">Devices</a>
          <a href="{{path}}/send">Test send</a>
          <a href="{{path}}/sends">Outcomes</a>
        </nav>
        {{/hub}}
        <main id="main">
        <h1>{{title}}</h1>
        {{{content}}}
        </main>
        </body>
        </html>
        """#

    static let login = #"""
        {{#expired}}<p class="notice" role="status">Your session has ended. Sign in again.</p>{{/expired}}
        {{#message}}<p class="error" role="alert">{{message}}</p>{{/message}}
        <form class="card" method="post" action="/console/login">
          <input type="hidden" name="_csrf" value="{{csrf}}">
          <label for="user">User name</label>
          <input id="user" name="user" autocomplete="username" required value="{{user}}">
          <label for="password">Password</label>
          <input id="password" name="password" type="password" autocomplete="current-password" required>
          <button type="submit">Sign in</button>
        </form>
        <p class="hint">For operators: a Herald account with the Manage right on a hub
        (<code>herald hubs grant default USER Manage</code> makes the stack's admin).</p>
        """#

    static let error = #"""
        <p class="error" role="alert">{{message}}</p>
        <p><a href="/console/hubs">Back to the hubs</a></p>
        """#

    static let hubs = #"""
        <div class="scroll" tabindex="0" role="region" aria-label="Hubs table">
        <table>
          <caption>Hubs you manage</caption>
          <thead><tr><th scope="col">Hub</th><th scope="col">Created</th><th scope="col">Keys</th><th scope="col">Installation limit</th></tr></thead>
          <tbody>
          {{#hubs}}<tr><td><a href="{{path}}">{{name}}</a></td><td>{{created}}</td><td>{{keys}}</td><td>{{limit}}</td></tr>{{/hubs}}
          </tbody>
        </table>
        </div>
        {{#admin}}
        <h2>Create a hub</h2>
        <form class="card" method="post" action="/console/hubs">
          <input type="hidden" name="_csrf" value="{{csrf}}">
          <label for="name">Name</label>
          <input id="name" name="name" required maxlength="50" pattern="[A-Za-z0-9][A-Za-z0-9._\-]*"
            aria-describedby="name-help">
          <small id="name-help">1 to 50 characters of a-z A-Z 0-9 . - _, starting with a letter or digit.</small>
          <label for="max_installations">Installation limit (0: none)</label>
          <input id="max_installations" name="max_installations" type="number" min="0" value="0">
          <button type="submit">Create hub</button>
        </form>
        {{/admin}}
        """#

    static let hub = #"""
        <p>Created {{created}}. Installation limit: {{limit}}.</p>
        <h2>Push credentials</h2>
        <div class="scroll" tabindex="0" role="region" aria-label="Push credentials table">
        <table>
          <caption>What delivers each platform (secrets are never shown)</caption>
          <thead><tr><th scope="col">Platform</th><th scope="col">Status</th><th scope="col">Source</th><th scope="col">Identifiers</th>
            <th scope="col">Last push-service error</th></tr></thead>
          <tbody>
          {{#platforms}}<tr><th scope="row">{{platform}}</th><td><span class="badge {{status}}">{{status}}</span></td><td>{{source}}</td>
            <td>{{summary}}{{#updated}} <small>(set {{updated}})</small>{{/updated}}{{#expires}}
              <small>{{#expiresSoon}}<strong>ends {{expires}}</strong>{{/expiresSoon}}{{^expiresSoon}}ends {{expires}}{{/expiresSoon}}</small>{{/expires}}</td>
            <td>{{#lastError}}<code>{{lastError}}</code> <small>{{lastErrorAt}}</small>{{/lastError}}{{^lastError}}none{{/lastError}}</td></tr>{{/platforms}}
          </tbody>
        </table>
        </div>
        <p class="hint">A platform is <em>failing</em> when the hub's latest send to it failed on every device. Secrets are
        checked when set and never shown again. APNs takes a signing key (.p8, token auth) or a certificate (.p12 or PEM,
        certificate auth); a certificate's end is in bold from 14 days before.</p>
        {{#platforms}}
        <details class="card">
          <summary>Set {{platform}} credentials</summary>
          <form method="post" action="{{setAction}}?_csrf={{csrf}}" enctype="multipart/form-data">
            <input type="hidden" name="_csrf" value="{{csrf}}">
            {{#fields}}<label for="{{id}}">{{label}}</label>
            <input id="{{id}}" name="{{name}}" type="{{type}}"{{#accept}} accept="{{accept}}"{{/accept}}{{#placeholder}} placeholder="{{placeholder}}"{{/placeholder}}{{#required}} required{{/required}}>
            {{/fields}}<button type="submit">Save {{platform}} credentials</button>
          </form>
          {{#deleteAction}}<form method="post" action="{{deleteAction}}">
            <input type="hidden" name="_csrf" value="{{csrf}}">
            <button type="submit" class="danger">Delete {{platform}} credentials</button>
          </form>{{/deleteAction}}
        </details>
        {{/platforms}}
        <h2>Keys</h2>
        <ul class="keys">{{#keys}}<li><code>{{name}}</code>: {{rights}}
          <form class="inline" method="post" action="{{rotate}}"><input type="hidden" name="_csrf" value="{{csrf}}"><input type="hidden" name="which" value="primary">
            <button type="submit" aria-label="Rotate the primary secret of {{name}}">Rotate primary</button></form>
          <form class="inline" method="post" action="{{rotate}}"><input type="hidden" name="_csrf" value="{{csrf}}"><input type="hidden" name="which" value="secondary">
            <button type="submit" aria-label="Rotate the secondary secret of {{name}}">Rotate secondary</button></form>
          <form class="inline" method="post" action="{{revoke}}"><input type="hidden" name="_csrf" value="{{csrf}}">
            <button type="submit" class="danger" aria-label="Revoke {{name}}">Revoke</button></form>
        </li>{{/keys}}</ul>
        <form class="card" method="post" action="{{path}}/keys">
          <input type="hidden" name="_csrf" value="{{csrf}}">
          <label for="key-name">New key's name</label>
          <input id="key-name" name="name" required pattern="[A-Za-z0-9._\-]{1,256}">
          <fieldset><legend>Rights</legend>
            <label><input type="checkbox" name="listen" value="on" checked> Listen</label>
            <label><input type="checkbox" name="send" value="on"> Send</label>
            <label><input type="checkbox" name="manage" value="on"> Manage</label>
          </fieldset>
          <button type="submit">Create key</button>
        </form>
        <h2>Queue</h2>
        <div class="scroll" tabindex="0" role="region" aria-label="Queue table">
        <table>
          <caption>The hub's deliveries now</caption>
          <tbody>
          <tr><th scope="row">Deliveries waiting</th><td>{{pending}}</td></tr>
          <tr><th scope="row">Oldest due delivery has waited</th><td>{{oldestDue}}</td></tr>
          <tr><th scope="row">Requests refused for the request rate (this edge, since it started)</th><td>{{refused}}</td></tr>
          </tbody>
        </table>
        </div>
        <h2>Limits</h2>
        <div class="scroll" tabindex="0" role="region" aria-label="Limits table">
        <table>
          <caption>What the hub may use</caption>
          <thead><tr><th scope="col">Limit</th><th scope="col">Value</th><th scope="col">Used</th></tr></thead>
          <tbody>
          {{#limits}}<tr><th scope="row">{{name}}</th><td>{{value}}</td><td>{{used}}</td></tr>{{/limits}}
          </tbody>
        </table>
        </div>
        <p class="hint">Set with <code>herald hubs limits</code>. Beyond the request rate the API answers 429 with
        <code>Retry-After</code>; a send that would pass a push quota is refused whole (403 <code>QuotaExceeded</code>).</p>
        {{#deletable}}
        <h2>Delete the hub</h2>
        <form class="card" method="post" action="{{path}}/delete">
          <input type="hidden" name="_csrf" value="{{csrf}}">
          <label for="confirm">Type the hub's name, {{name}}, to delete it with its keys, credentials, devices and sends</label>
          <input id="confirm" name="confirm" autocomplete="off" required>
          <button type="submit" class="danger">Delete hub {{name}}</button>
        </form>
        {{/deletable}}
        """#

    static let secret = #"""
        <p class="notice" role="status">The key <code>{{name}}</code> of hub {{hub}} ({{rights}}): its secrets as connection strings,
        shown this once. Copy them now; the console cannot show them again.</p>
        <label for="primary">Primary</label>
        <textarea id="primary" readonly rows="3">{{primary}}</textarea>
        <label for="secondary">Secondary</label>
        <textarea id="secondary" readonly rows="3">{{secondary}}</textarea>
        <p><a href="{{path}}">Back to hub {{hub}}</a></p>
        """#

    static let devices = #"""
        <form class="filters" method="get" action="{{path}}" role="search">
          <div><label for="user">User</label><input id="user" name="user" value="{{user}}"></div>
          <div><label for="tag">Tag or expression</label><input id="tag" name="tag" value="{{tag}}" placeholder="sports &amp;&amp; !news"></div>
          <div><label for="platform">Platform</label>
            <select id="platform" name="platform">{{#platforms}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/platforms}}</select></div>
          <div><label for="handle">Handle starts with</label><input id="handle" name="handle" value="{{handle}}"></div>
          <div><button type="submit">Search</button></div>
        </form>
        <div class="scroll" tabindex="0" role="region" aria-label="Devices table">
        <table class="devices">
          <caption>Registrations and installations, by id</caption>
          <thead><tr><th scope="col">Id</th><th scope="col">Kind</th><th scope="col">User</th><th scope="col">Platform</th>
            <th scope="col">Handle</th><th scope="col">Tags</th><th scope="col">Updated</th><th scope="col"><span class="sr">Actions</span></th></tr></thead>
          <tbody>
          {{#devices}}<tr{{#expired}} class="expired"{{/expired}}><td><code>{{id}}</code></td><td>{{kind}}</td><td>{{owner}}</td><td>{{platform}}</td>
            <td class="handle"><code>{{handle}}</code>{{#expired}} <span class="badge failing">expired</span>{{/expired}}</td><td>{{tags}}</td><td>{{updated}}</td>
            <td><a href="{{send}}">Test send</a>
              <form class="inline" method="post" action="{{delete}}"><input type="hidden" name="_csrf" value="{{csrf}}">{{#deleteOwner}}<input type="hidden" name="owner" value="{{deleteOwner}}">{{/deleteOwner}}
                <button type="submit" class="danger" aria-label="Delete {{kind}} {{id}}">Delete</button></form></td></tr>{{/devices}}
          {{^devices}}<tr><td colspan="8">No device matches.</td></tr>{{/devices}}
          </tbody>
        </table>
        </div>
        <p class="pager">{{#first}}<a href="{{first}}">First page</a> {{/first}}{{#next}}<a href="{{next}}" rel="next">Next page</a>{{/next}}</p>
        <p class="hint">Handles the push service reported dead are deleted (registrations) or kept marked <em>expired</em>
        (installations, until their channel changes); a send's page counts the removed ones.</p>
        """#

    static let send = #"""
        {{#error}}<p class="error" role="alert">{{error}}</p>{{/error}}
        <form class="card send" method="post" action="{{action}}?_csrf={{csrf}}" enctype="multipart/form-data">
          <input type="hidden" name="_csrf" value="{{csrf}}">
          <fieldset>
            <legend>Target</legend>
            <label for="target">Send to</label>
            <select id="target" name="target">{{#targets}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/targets}}</select>
            <label for="user">User (for a user's devices, secure and rich)</label>
            <input id="user" name="user" value="{{user}}">
            <label for="tag">Tag expression</label>
            <input id="tag" name="tag" value="{{tag}}" placeholder="sports &amp;&amp; !news">
            <label for="handle">Device handle</label>
            <input id="handle" name="handle" value="{{handle}}">
            <label for="platform">Device platform</label>
            <select id="platform" name="platform">{{#platforms}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/platforms}}</select>
          </fieldset>
          <fieldset>
            <legend>Content</legend>
            <label for="kind">Kind</label>
            <select id="kind" name="kind">{{#kinds}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/kinds}}</select>
            <label for="text">Text (alert, secure)</label>
            <textarea id="text" name="text" rows="3">{{text}}</textarea>
            <label for="file">File (rich)</label>
            <input id="file" name="file" type="file">
            <label for="message">Message shown with rich content</label>
            <input id="message" name="message" value="{{message}}">
            <label for="properties">Template properties, one name=value a line</label>
            <textarea id="properties" name="properties" rows="3">{{properties}}</textarea>
          </fieldset>
          <div class="buttons">
            <button type="submit" name="action" value="preview">Preview payloads</button>
            <button type="submit" name="action" value="send" class="primary">Send</button>
          </div>
        </form>
        {{#previewed}}
        <section aria-labelledby="preview-title">
        <h2 id="preview-title">Native payloads</h2>
        {{#stored}}<p class="hint">The content is stored by herald-payload when sent; <code>0</code> stands for the id it gets then.</p>{{/stored}}
        {{#template}}<p class="hint">A template send renders each matching installation template with these properties when it is sent.</p>{{/template}}
        {{#preview}}
        <h3>{{platform}}</h3>
        <p>Push type <code>{{pushType}}</code>, priority {{priority}}, content type {{contentType}}.</p>
        <pre class="payload">{{body}}</pre>
        {{/preview}}
        </section>
        {{/previewed}}
        """#

    static let sends = #"""
        <section aria-labelledby="hour-title">
        <h2 id="hour-title">Last hour</h2>
        <p>{{sendsInHour}} sends, {{delivered}} delivered, {{failed}} failed (counted in the minute each send was made).</p>
        {{{chart}}}
        <ul class="legend"><li><span class="swatch delivered"></span>delivered</li><li><span class="swatch failed"></span>failed</li></ul>
        {{#hasReasons}}<h3>Failures by reason</h3>{{/hasReasons}}
        <ul>{{#reasons}}<li><code>{{reason}}</code>: {{count}}</li>{{/reasons}}</ul>
        </section>
        <div class="scroll" tabindex="0" role="region" aria-label="Recent sends table">
        <table>
          <caption>Recent sends, newest first</caption>
          <thead><tr><th scope="col">Send</th><th scope="col">State</th><th scope="col">Made</th><th scope="col">Sender</th><th scope="col">Per platform</th></tr></thead>
          <tbody>
          {{#sends}}<tr><td><a href="{{path}}"><code>{{id}}</code></a></td><td><span class="badge {{state}}">{{state}}</span></td><td>{{created}}</td><td>{{sender}}</td><td>{{counts}}</td></tr>{{/sends}}
          {{^sends}}<tr><td colspan="5">No sends yet.</td></tr>{{/sends}}
          </tbody>
        </table>
        </div>
        {{#next}}<p class="pager"><a href="{{next}}" rel="next">Older sends</a></p>{{/next}}
        """#

    static let outcome = #"""
        <section id="outcome"{{#live}} data-live="1"{{/live}} aria-live="polite">
        <p>State: <span class="badge {{state}}" id="state">{{state}}</span>{{#live}} <small>(following: this page updates itself)</small>{{/live}}</p>
        <p>Sent by {{sender}} at {{created}}.{{#started}} Started {{started}}.{{/started}}{{#finished}} Finished {{finished}}.{{/finished}}</p>
        <div class="scroll" tabindex="0" role="region" aria-label="Per-platform counts table">
        <table>
          <caption>Per platform</caption>
          <thead><tr><th scope="col">Platform</th><th scope="col">Delivered</th><th scope="col">Failed</th><th scope="col">Pending</th>
            <th scope="col">Removed handles</th><th scope="col">Retries</th><th scope="col">Failures by reason</th></tr></thead>
          <tbody>
          {{#platforms}}<tr><th scope="row">{{platform}}</th><td>{{success}}</td><td>{{failure}}</td><td>{{pending}}</td><td>{{removed}}</td><td>{{retries}}</td><td>{{failures}}</td></tr>{{/platforms}}
          </tbody>
        </table>
        </div>
        <div class="scroll" tabindex="0" role="region" aria-label="Deliveries table">
        <table>
          <caption>Deliveries</caption>
          <thead><tr><th scope="col">#</th><th scope="col">Platform</th><th scope="col">State</th><th scope="col">Attempts</th><th scope="col">Status</th>
            <th scope="col">Reason</th><th scope="col">Handle</th><th scope="col">Message id</th><th scope="col">Next attempt</th></tr></thead>
          <tbody>
          {{#deliveries}}<tr><td>{{sequence}}</td><td>{{platform}}</td><td>{{state}}</td><td>{{attempts}}</td><td>{{status}}</td><td>{{reason}}</td>
            <td class="handle"><code>{{handle}}</code></td><td><code>{{messageID}}</code></td><td>{{next}}</td></tr>{{/deliveries}}
          {{^deliveries}}<tr><td colspan="9">No deliveries.</td></tr>{{/deliveries}}
          </tbody>
        </table>
        </div>
        {{#next}}<p class="pager"><a href="{{next}}" rel="next">More deliveries</a></p>{{/next}}
        </section>
        """#

    static let inbox = #"""
        <p class="hint">What the inbox provider recorded instead of sending (platforms without credentials), newest first.</p>
        {{#entries}}
        <article class="entry">
          <h2><a href="/console/sends/{{notificationID}}"><code>{{notificationID}}</code></a> → {{platform}}</h2>
          <p><small>#{{sequence}} at {{recorded}}</small></p>
          <p class="handle">Handle <code>{{handle}}</code></p>
          <details><summary>Headers</summary><pre>{{headers}}</pre></details>
          <pre class="payload">{{payload}}</pre>
        </article>
        {{/entries}}
        {{^entries}}<p>The inbox is empty.</p>{{/entries}}
        {{#next}}<p class="pager"><a href="{{next}}" rel="next">Older entries</a></p>{{/next}}
        """#
}
