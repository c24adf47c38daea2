public import HeraldModel

/// Who may call each route of the edge: the rights table.
///
/// One row per registered method and path. `RouteRightsTests` enumerates the router and fails on
/// a route without a row (or a row without a route), sends every Notification Hubs row with each
/// kind of key to check that exactly the keys the row names are let through, and checks that the
/// rights table in docs/security.md is ``markdown``, so the document cannot drift from this.
public enum RouteRights {
    /// What a caller must present.
    public enum Needs: Sendable, Equatable {
        /// Nothing: probes, the API document, the console's sign-in page and assets.
        case anyone
        /// A Herald user (Basic, or a Bearer token); the text says what more, if anything.
        case user(String)
        /// A hub's SAS token with these rights (NH's Listen, Send, Manage claims).
        case key(HubRights)
        /// Manage; or Listen when `$filter` names one device handle (that handle's entries only).
        case manageOrOneHandle
        /// A Herald user (Basic or Bearer) with Manage: where, the case says.
        case manage(Managed)
        /// A console session; the text says on what.
        case console(String)
        /// Only on a stack started with `test-mode` (404 otherwise); no credentials.
        case testMode
    }

    /// Where a management route needs Manage (`/v1/hubs…`).
    public enum Managed: Sendable, Equatable {
        /// Any Herald user, who is answered only the hubs they hold Manage on.
        case theirHubs
        /// Manage on the hub default (the stack's administrator).
        case defaultHub
        /// Manage on the hub the path names, or on the hub default.
        case pathHub
        /// Manage on the hub default; with `?hub=`, Manage on that hub (for its own records).
        case queryHub
    }

    public struct Row: Sendable {
        public var method: String
        /// As Hummingbird describes it: `/{hub}/installations/{id}`.
        public var path: String
        public var needs: Needs
        /// The action of the audit record each call appends (``AuditMiddleware``), for a route that
        /// changes how a hub is managed: its hubs, keys, credentials, limits, users, devices by an
        /// operator. Nil: the route changes nothing an operator answers for (a device's own
        /// registration, a send, a sign-in).
        public var audit: String?

        init(_ method: String, _ path: String, _ needs: Needs, audit: String? = nil) {
            self.method = method
            self.path = path
            self.needs = needs
            self.audit = audit
        }

        /// "GET /{hub}/installations", as `Router.routes` prints a route.
        public var route: String { "\(method) \(path)" }
    }

    static let ownDevicesOrSend = "a Herald user: to their own devices; to another user or a tag, with Send on the hub"

    public static let table: [Row] = [
        Row("GET", "/healthz", .anyone),
        Row("GET", "/readyz", .anyone),
        Row("GET", "/openapi.json", .anyone),
        Row("GET", "/metrics", .anyone),
        // The tutorial's API.
        Row("POST", "/api/register", .user("their own new registration id")),
        Row("PUT", "/api/register/{id}", .user("a registration id they were given")),
        Row("DELETE", "/api/register/{id}", .user("their own registration")),
        Row("POST", "/api/notifications", .user(ownDevicesOrSend)),
        Row("GET", "/api/notifications/{id}", .user("content sent to them (secure) or any rich content")),
        // Herald's own.
        Row("POST", "/v1/notifications", .user(ownDevicesOrSend)),
        Row("GET", "/v1/notifications/{id}/outcome", .user("their own sends")),
        Row("GET", "/v1/notifications/{id}/failures", .user("their own sends")),
        Row("POST", "/v1/auth/token", .user("Basic credentials")),
        Row("DELETE", "/v1/auth/token", .user("the Bearer token itself")),
        // Hubs over HTTP: Manage on the hub default for everything, on a hub for that hub but its limits.
        Row("GET", "/v1/hubs", .manage(.theirHubs)),
        Row("POST", "/v1/hubs", .manage(.defaultHub), audit: "hub.create"),
        Row("GET", "/v1/hubs/{hub}", .manage(.pathHub)),
        Row("DELETE", "/v1/hubs/{hub}", .manage(.pathHub), audit: "hub.delete"),
        Row("PUT", "/v1/hubs/{hub}/keys/{key}", .manage(.pathHub), audit: "key.set"),
        Row("POST", "/v1/hubs/{hub}/keys/{key}/rotate", .manage(.pathHub), audit: "key.rotate"),
        Row("DELETE", "/v1/hubs/{hub}/keys/{key}", .manage(.pathHub), audit: "key.revoke"),
        Row("GET", "/v1/hubs/{hub}/credentials", .manage(.pathHub)),
        Row("PUT", "/v1/hubs/{hub}/credentials/{platform}", .manage(.pathHub), audit: "credentials.set"),
        Row("DELETE", "/v1/hubs/{hub}/credentials/{platform}", .manage(.pathHub), audit: "credentials.delete"),
        Row("GET", "/v1/hubs/{hub}/limits", .manage(.pathHub)),
        Row("PATCH", "/v1/hubs/{hub}/limits", .manage(.defaultHub), audit: "limits.set"),
        Row("GET", "/v1/audit", .manage(.queryHub)),
        Row("GET", "/v1/test/inbox", .testMode),
        Row("POST", "/v1/test/reset", .testMode),
        // Notification Hubs: registrations.
        Row("POST", "/{hub}/registrationIDs", .key(.listen)),
        Row("POST", "/{hub}/registrationids", .key(.listen)),
        Row("POST", "/{hub}/registrations", .key(.listen)),
        Row("POST", "/{hub}/Registrations", .key(.listen)),
        Row("PUT", "/{hub}/registrations/{id}", .key(.listen)),
        Row("PUT", "/{hub}/Registrations/{id}", .key(.listen)),
        Row("GET", "/{hub}/registrations/{id}", .key(.listen)),
        Row("GET", "/{hub}/Registrations/{id}", .key(.listen)),
        Row("DELETE", "/{hub}/registrations/{id}", .key(.listen)),
        Row("DELETE", "/{hub}/Registrations/{id}", .key(.listen)),
        Row("GET", "/{hub}/registrations", .manageOrOneHandle),
        Row("GET", "/{hub}/Registrations", .manageOrOneHandle),
        Row("GET", "/{hub}/tags/{tag}/registrations", .key(.manage)),
        // Installations and the hub's data.
        Row("PUT", "/{hub}/installations/{id}", .key(.listen)),
        Row("PATCH", "/{hub}/installations/{id}", .key(.listen)),
        Row("GET", "/{hub}/installations/{id}", .key(.listen)),
        Row("DELETE", "/{hub}/installations/{id}", .key(.listen)),
        Row("GET", "/{hub}/installations", .key(.manage)),
        Row("GET", "/{hub}/export", .key(.manage)),
        Row("DELETE", "/{hub}/users/{user}", .key(.manage), audit: "user.erase"),
        // Sends.
        Row("POST", "/{hub}/messages", .key(.send)),
        Row("POST", "/{hub}/messages/$batch", .key(.send)),
        Row("GET", "/{hub}/messages/{id}", .key(.send)),
        Row("GET", "/{hub}/messages/{id}/failures", .key(.send)),
        Row("POST", "/{hub}/schedulednotifications", .key(.send)),
        Row("DELETE", "/{hub}/schedulednotifications/{id}", .key(.send)),
        // The console.
        Row("GET", "/console", .anyone),
        Row("GET", "/console/assets/console.css", .anyone),
        Row("GET", "/console/assets/console.js", .anyone),
        Row("GET", "/console/login", .anyone),
        Row("POST", "/console/login", .anyone),
        Row("POST", "/console/logout", .console("any session")),
        Row("GET", "/console/hubs", .console("the hubs it holds Manage on")),
        Row("POST", "/console/hubs", .console("an administrator"), audit: "hub.create"),
        Row("GET", "/console/hubs/{hub}", .console("Manage on the hub")),
        Row("GET", "/console/hubs/{hub}/devices", .console("Manage on the hub")),
        Row("GET", "/console/hubs/{hub}/send", .console("Manage on the hub")),
        Row("POST", "/console/hubs/{hub}/send", .console("Manage on the hub")),
        Row("GET", "/console/hubs/{hub}/sends", .console("Manage on the hub")),
        Row("GET", "/console/hubs/{hub}/sends/{id}", .console("Manage on the hub")),
        Row(
            "POST", "/console/hubs/{hub}/credentials/{platform}", .console("Manage on the hub"),
            audit: "credentials.set"),
        Row(
            "POST", "/console/hubs/{hub}/credentials/{platform}/delete", .console("Manage on the hub"),
            audit: "credentials.delete"),
        Row("POST", "/console/hubs/{hub}/keys", .console("Manage on the hub"), audit: "key.set"),
        Row("POST", "/console/hubs/{hub}/keys/{key}/rotate", .console("Manage on the hub"), audit: "key.rotate"),
        Row("POST", "/console/hubs/{hub}/keys/{key}/revoke", .console("Manage on the hub"), audit: "key.revoke"),
        Row("POST", "/console/hubs/{hub}/delete", .console("Manage on the hub"), audit: "hub.delete"),
        Row(
            "POST", "/console/hubs/{hub}/installations/{id}/delete", .console("Manage on the hub"),
            audit: "device.delete"),
        Row(
            "POST", "/console/hubs/{hub}/registrations/{id}/delete", .console("Manage on the hub"),
            audit: "device.delete"),
        Row("GET", "/console/inbox", .console("an administrator, on a stack without push credentials")),
        Row("GET", "/console/sends/{id}", .console("Manage on the send's hub")),
    ]

    /// The words of `needs` in the rights table.
    static func words(_ needs: Needs) -> String {
        switch needs {
        case .anyone: "anyone"
        case .user(let what): what.hasPrefix("a Herald user") ? what : "a Herald user: \(what)"
        case .key(let rights): "a SAS token with \(rights.names.joined(separator: ", "))"
        case .manageOrOneHandle:
            "a SAS token with Manage; or with Listen and `$filter` by one device handle (that handle's entries only)"
        case .manage(.theirHubs):
            "a Herald user: the hubs they hold Manage on (every hub with Manage on the hub default)"
        case .manage(.defaultHub): "a Herald user with Manage on the hub default"
        case .manage(.pathHub): "a Herald user with Manage on the hub, or on the hub default"
        case .manage(.queryHub):
            "a Herald user with Manage on the hub default; with `?hub=`, Manage on that hub (its records only)"
        case .console(let what): "a console session: \(what)"
        case .testMode: "anyone, on a stack in test mode (404 otherwise)"
        }
    }

    /// The rights table of docs/security.md.
    public static var markdown: String {
        var lines = ["| route | who may call it | audit record |", "|---|---|---|"]
        for row in table {
            lines.append("| `\(row.route)` | \(words(row.needs)) | \(row.audit.map { "`\($0)`" } ?? "") |")
        }
        return lines.joined(separator: "\n")
    }

    /// The audit action of each audited route, by "METHOD /path/{pattern}".
    static let auditActions: [String: String] = Dictionary(
        table.compactMap { row in row.audit.map { (row.route, $0) } }, uniquingKeysWith: { first, _ in first })
}
