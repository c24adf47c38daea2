import Foundation
import HeraldClient
import HeraldModel
import HeraldProto
import HeraldRPC
import Hummingbird

/// The console's forms that change a hub: its push credentials, its
/// keys, its devices, the hub itself. Each is a POST with the session's CSRF token, for an operator
/// with Manage on the hub, over the same RPCs as `/v1/hubs` and `herald hubs`; each answers with a
/// redirect to the page it changed, but a key's new secrets, which are shown once on a page of
/// their own (`Cache-Control: no-store`).
extension ConsoleRoutes {
    func addActions(to console: RouterGroup<EdgeRequestContext>) {
        console.post("hubs/:hub/credentials/:platform") { request, context in
            await managedPage(request, context) { try await setCredentials(request, context, $0, hub: $1) }
        }
        console.post("hubs/:hub/credentials/:platform/delete") { request, context in
            await managedPage(request, context) { session, hub in
                try Self.requireCSRF(try await ConsolePage.form(request, config, session: session), session)
                _ = try await dispatch.deleteHubCredentials(
                    DeleteHubCredentialsRequest(hub: hub.id, platform: try HubRoutes.platform(context)),
                    requestID: context.requestID)
                return ConsolePage.redirect(Self.path(hub))
            }
        }
        console.post("hubs/:hub/keys") { request, context in
            await managedPage(request, context) { try await createKey(request, context, $0, hub: $1) }
        }
        console.post("hubs/:hub/keys/:key/rotate") { request, context in
            await managedPage(request, context) { session, hub in
                let form = try await ConsolePage.form(request, config, session: session)
                try Self.requireCSRF(form, session)
                let which = form["which"] ?? "primary"
                guard which == "primary" || which == "secondary" else {
                    throw EdgeError(.badRequest, "which must be primary or secondary")
                }
                let key = try await auth.rotateHubKey(
                    RotateHubKeyRequest(
                        hub: hub.name, name: try EdgeHTTP.text(try context.parameters.require("key"), "key"),
                        which: which),
                    requestID: context.requestID)
                return Self.secretPage(key, hub: hub, request: request, session: session)
            }
        }
        console.post("hubs/:hub/keys/:key/revoke") { request, context in
            await managedPage(request, context) { session, hub in
                try Self.requireCSRF(try await ConsolePage.form(request, config, session: session), session)
                _ = try await auth.revokeHubKey(
                    RevokeHubKeyRequest(
                        hub: hub.name, name: try EdgeHTTP.text(try context.parameters.require("key"), "key")),
                    requestID: context.requestID)
                return ConsolePage.redirect(Self.path(hub))
            }
        }
        console.post("hubs/:hub/delete") { request, context in
            await managedPage(request, context) { session, hub in
                let form = try await ConsolePage.form(request, config, session: session)
                try Self.requireCSRF(form, session)
                guard form["confirm"] == hub.name else {
                    throw EdgeError(.badRequest, "type the hub's name, \(hub.name), to delete it")
                }
                _ = try await HubAdministration.delete(
                    name: hub.name, id: hub.id, auth: auth, registration: registration, dispatch: dispatch,
                    requestID: context.requestID)
                return ConsolePage.redirect("/console/hubs")
            }
        }
        console.post("hubs/:hub/installations/:id/delete") { request, context in
            await managedPage(request, context) { session, hub in
                try Self.requireCSRF(try await ConsolePage.form(request, config, session: session), session)
                let id = try EdgeHTTP.text(try context.parameters.require("id"), "id")
                try await Self.deleted {
                    _ = try await registration.deleteInstallation(
                        DeleteInstallationRequest(hub: hub.id, installationID: id), requestID: context.requestID)
                }
                return ConsolePage.redirect("\(Self.path(hub))/devices")
            }
        }
        console.post("hubs/:hub/registrations/:id/delete") { request, context in
            await managedPage(request, context) { session, hub in
                let form = try await ConsolePage.form(request, config, session: session)
                try Self.requireCSRF(form, session)
                let id = try EdgeHTTP.text(try context.parameters.require("id"), "id")
                let owner = try EdgeHTTP.text(form["owner"] ?? "", "owner")
                try await Self.deleted {
                    if owner.isEmpty {
                        _ = try await registration.deleteHubRegistration(
                            DeleteHubRegistrationRequest(hub: hub.id, registrationID: id), requestID: context.requestID)
                    } else {
                        // A tutorial registration (api/register): the hub default's, deleted as its
                        // owner would, so only a registration that user holds goes.
                        guard hub.id == Names.defaultHub else {
                            throw EdgeError(.badRequest, "registrations with an owner belong to the hub default")
                        }
                        _ = try await registration.deleteRegistration(
                            DeleteRegistrationRequest(owner: owner, registrationID: id), requestID: context.requestID)
                    }
                }
                return ConsolePage.redirect("\(Self.path(hub))/devices")
            }
        }
    }

    /// `body`, a deletion: one already gone (a second click, another operator) is done too.
    static func deleted(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let error as ServiceError where error.code == .notFound {
            return
        }
    }

    static func path(_ hub: ConsoleHub) -> String { "/console/hubs/\(ConsolePage.pathComponent(hub.name))" }

    /// The inputs of a platform's credentials form, named as the CLI names the settings; the
    /// secret files are uploads. A test double's address (`url`) is not among them: the CLI, or
    /// `/v1/hubs` on an edge in test-mode, sets it.
    static func credentialFields(_ platform: Platform) -> [ConsoleView.Hub.Field] {
        typealias Field = ConsoleView.Hub.Field
        let name = platform.name
        func field(
            _ setting: String, _ label: String, type: String = "text", accept: String? = nil,
            placeholder: String? = nil, required: Bool = true
        ) -> Field {
            Field(
                id: "\(name)-\(setting)", name: setting, label: label, type: type, accept: accept,
                placeholder: placeholder, required: required)
        }
        switch platform {
        case .apns:
            // Token auth (key, key id, team id, topic) or certificate auth (certificate, its
            // password; the topic defaults to the certificate's): dispatch says what is missing.
            return [
                field("key", "Signing key (.p8), for token auth", type: "file", accept: ".p8,.pem", required: false),
                field("key-id", "Key id", required: false), field("team-id", "Team id", required: false),
                field(
                    "certificate", "Or a certificate (.p12, or PEM with its key), for certificate auth", type: "file",
                    accept: ".p12,.pfx,.pem", required: false),
                field("certificate-password", "Certificate password", type: "password", required: false),
                field(
                    "topic", "Topic (the app's bundle id)", placeholder: "the certificate's, with a certificate",
                    required: false),
                field("environment", "Environment", placeholder: "production or sandbox", required: false),
            ]
        case .fcm: return [field("service-account", "Service account (.json)", type: "file", accept: ".json")]
        case .wns: return [field("client-id", "Client id"), field("client-secret", "Client secret", type: "password")]
        default:
            return [
                field("vapid-key", "VAPID key (EC P-256, .pem)", type: "file", accept: ".pem"),
                field("subject", "Subject", placeholder: "mailto:ops@example.com"),
            ]
        }
    }

    /// The credentials form: text fields and uploaded files by setting name, checked by
    /// herald-dispatch now (a wrong key is the error page, nothing stored).
    func setCredentials(_ request: Request, _ context: EdgeRequestContext, _ session: ConsoleSession, hub: ConsoleHub)
        async throws -> Response
    {
        let (fields, files) = try await ConsolePage.upload(request, config, session: session)
        try Self.requireCSRF(fields, session)
        let platform = try HubRoutes.platform(context)
        var settings: [String: String] = [:]
        for (name, value) in fields where name != "_csrf" && !value.isEmpty {
            settings[name] = try EdgeHTTP.text(value, name)
        }
        for (name, file) in files where !file.bytes.isEmpty {
            // A certificate is a binary .p12 (or PEM): the setting carries the file in base64.
            settings[name] =
                name == "certificate"
                ? Data(file.bytes).base64EncodedString()
                : try EdgeHTTP.text(String(decoding: file.bytes, as: UTF8.self), name)
        }
        guard settings["url"] == nil, settings["token-url"] == nil else {
            throw EdgeError(.badRequest, "a test double's address is set with the CLI, not the console")
        }
        _ = try await dispatch.setHubCredentials(
            try SetHubCredentialsRequest(hub: hub.id, platform: platform, settings: settings),
            requestID: context.requestID)
        return ConsolePage.redirect(Self.path(hub))
    }

    /// A new key: its name and rights from the form; its secrets shown once.
    func createKey(_ request: Request, _ context: EdgeRequestContext, _ session: ConsoleSession, hub: ConsoleHub)
        async throws -> Response
    {
        let form = try await ConsolePage.form(request, config, session: session)
        try Self.requireCSRF(form, session)
        let name = try EdgeHTTP.text(form["name"] ?? "", "name")
        AuditTrail.target(name)
        let current = try await auth.getHub(GetHubRequest(name: hub.name), requestID: context.requestID)
        guard !current.keys.contains(where: { $0.name == name }) else {
            throw EdgeError(.conflict, "the hub has a key named \(name): rotate or revoke it instead")
        }
        let rights: HubRights = [
            form["listen"] == "on" ? .listen : [], form["send"] == "on" ? .send : [],
            form["manage"] == "on" ? .manage : [],
        ]
        guard !rights.isEmpty else { throw EdgeError(.badRequest, "a key needs at least one right") }
        AuditTrail.detail("rights: \(rights.names.joined(separator: ", "))")
        let key = try await auth.setHubKey(
            SetHubKeyRequest(hub: hub.name, name: name, rights: rights.proto), requestID: context.requestID)
        return Self.secretPage(key, hub: hub, request: request, session: session)
    }

    /// A key's secrets as connection strings for the edge the browser reached, shown this once.
    static func secretPage(_ key: HubKey, hub: ConsoleHub, request: Request, session: ConsoleSession) -> Response {
        let endpoint = HubRoutes.endpoint(request)
        var response = ConsolePage.render(
            "secret", title: "Key \(key.name)", session: session,
            view: ConsoleView.Secret(
                hub: hub.name, path: path(hub), name: key.name, rights: key.hubRights.names.joined(separator: ", "),
                primary: HubAdministration.connectionString(endpoint: endpoint, key: key),
                secondary: HubAdministration.connectionString(endpoint: endpoint, key: key, secondary: true)),
            hub: hub.name)
        response.headers[.cacheControl] = "no-store"
        return response
    }
}
