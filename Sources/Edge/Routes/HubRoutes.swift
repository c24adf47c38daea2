import Foundation
import HTTPTypes
import HeraldClient
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import Hummingbird

/// `/v1/hubs…`: hubs, their keys, push credentials and limits over HTTP, for a platform
/// team's own tooling, over the same RPCs as `herald hubs` and the console.
///
/// - A Herald user (Basic or Bearer) with Manage on the hub default may do everything; Manage on a
///   hub, everything to that hub but creating hubs. The rights are asked of herald-auth for the hub
///   the path names before anything of the hub is read, so a caller without them learns nothing of
///   it, not even whether it exists (403 either way).
/// - Secrets are shown once: a hub's two default keys when it is created, a key's when it is made
///   or rotated (with `Cache-Control: no-store`). Credentials are never read back: their status,
///   identifiers, and the push service's last failure only.
/// - Test doubles' URLs (`url`, `tokenUrl` in credentials) are taken only from an edge in
///   `test-mode`: anywhere else they would let a hub's manager aim herald-dispatch at any address.
/// - Not counted against the hub's request rate, as the console is not: an operator must be able
///   to raise a limit while the hub is throttled.
struct HubRoutes: Sendable {
    let users: UserAuthentication
    let auth: any AuthServiceClientProtocol
    let registration: any RegistrationServiceClientProtocol
    let dispatch: any DispatchServiceClientProtocol
    let config: EdgeConfig

    func add(to router: Router<EdgeRequestContext>) {
        router.get("v1/hubs") { request, context in try await list(request, context) }
        router.post("v1/hubs") { request, context in try await create(request, context) }
        router.get("v1/hubs/:hub") { request, context in
            let (hub, pushes) = try await HubAdministration.limits(
                of: try await managed(request, context), auth: auth, dispatch: dispatch, requestID: context.requestID)
            return try EdgeHTTP.json(try await detail(hub, pushes, context))
        }
        router.delete("v1/hubs/:hub") { request, context in
            let hub = try await managed(request, context)
            let deleted = try await HubAdministration.delete(
                name: hub.name, id: hub.id, auth: auth, registration: registration, dispatch: dispatch,
                requestID: context.requestID)
            return try EdgeHTTP.json(
                DeletedBody(
                    name: hub.name, devices: deleted.devices, sends: deleted.sends,
                    cancelledSends: deleted.cancelledSends))
        }
        router.put("v1/hubs/:hub/keys/:key") { request, context in try await setKey(request, context) }
        router.post("v1/hubs/:hub/keys/:key/rotate") { request, context in
            let hub = try await managed(request, context)
            let which = request.uri.queryParameters.get("which") ?? "primary"
            guard which == "primary" || which == "secondary" else {
                throw EdgeError(.badRequest, "which must be primary or secondary")
            }
            let key = try await auth.rotateHubKey(
                RotateHubKeyRequest(hub: hub.name, name: try Self.keyName(context), which: which),
                requestID: context.requestID)
            return try Self.secret(KeyBody(key, endpoint: Self.endpoint(request)), status: .ok)
        }
        router.delete("v1/hubs/:hub/keys/:key") { request, context in
            let hub = try await managed(request, context)
            _ = try await auth.revokeHubKey(
                RevokeHubKeyRequest(hub: hub.name, name: try Self.keyName(context)), requestID: context.requestID)
            return Response(status: .noContent)
        }
        router.get("v1/hubs/:hub/credentials") { request, context in
            let hub = try await managed(request, context)
            let answer = try await dispatch.getHubCredentials(
                GetHubCredentialsRequest(hub: hub.id), requestID: context.requestID)
            return try EdgeHTTP.json(CredentialsBody(answer))
        }
        router.put("v1/hubs/:hub/credentials/:platform") { request, context in
            try await setCredentials(request, context)
        }
        router.delete("v1/hubs/:hub/credentials/:platform") { request, context in
            let hub = try await managed(request, context)
            let answer = try await dispatch.deleteHubCredentials(
                DeleteHubCredentialsRequest(hub: hub.id, platform: try Self.platform(context)),
                requestID: context.requestID)
            return try EdgeHTTP.json(CredentialsBody(answer))
        }
        router.get("v1/hubs/:hub/limits") { request, context in
            let (changed, pushes) = try await HubAdministration.limits(
                of: try await managed(request, context), auth: auth, dispatch: dispatch, requestID: context.requestID)
            return try EdgeHTTP.json(LimitsBody(changed, pushes))
        }
        router.patch("v1/hubs/:hub/limits") { request, context in try await setLimits(request, context) }
        router.get("v1/audit") { request, context in try await auditTrail(request, context) }
    }

    // MARK: rights

    /// The caller's user name when they hold Manage on hub `name` (nil: on the hub default only);
    /// 403 otherwise, before anything of the hub is read.
    func requireManage(_ request: Request, _ context: EdgeRequestContext, hub name: String?) async throws -> String {
        let authorization = try EdgeHTTP.authorization(request)
        if let name, name.lowercased() != Names.defaultHub {
            let onHub = try await users.verdict(
                AuthenticateRequest(authorization: authorization, hub: name, clientAddress: context.remoteIP),
                requestID: context.requestID)
            AuditTrail.caller("user:\(onHub.user)")
            if onHub.hubRights.contains(.manage) { return onHub.user }
        }
        let onDefault = try await users.verdict(
            AuthenticateRequest(authorization: authorization, hub: Names.defaultHub, clientAddress: context.remoteIP),
            requestID: context.requestID)
        AuditTrail.caller("user:\(onDefault.user)")
        guard onDefault.hubRights.contains(.manage) else {
            throw EdgeError(
                .forbidden,
                name.map { "\(onDefault.user) does not hold the Manage right on hub \($0) or on the hub default" }
                    ?? "\(onDefault.user) does not hold the Manage right on the hub default")
        }
        return onDefault.user
    }

    /// The hub the path names, once the caller may manage it (404 for an admin when there is none).
    func managed(_ request: Request, _ context: EdgeRequestContext) async throws -> Hub {
        let name = try Self.hubName(context)
        _ = try await requireManage(request, context, hub: name)
        let hub = try await auth.getHub(GetHubRequest(name: name), requestID: context.requestID)
        AuditTrail.hub(name: hub.name, id: hub.id)
        return hub
    }

    // MARK: hubs

    /// `GET /v1/hubs`: the hubs the caller manages (every hub for Manage on the hub default).
    func list(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let authorization = try EdgeHTTP.authorization(request)
        let onDefault = try await users.verdict(
            AuthenticateRequest(authorization: authorization, hub: Names.defaultHub, clientAddress: context.remoteIP),
            requestID: context.requestID)
        var hubs: [HubBody] = []
        for hub in try await auth.listHubs(ListHubsRequest(), requestID: context.requestID).hubs {
            if !onDefault.hubRights.contains(.manage) {
                let onHub = try await users.verdict(
                    AuthenticateRequest(authorization: authorization, hub: hub.name, clientAddress: context.remoteIP),
                    requestID: context.requestID)
                guard onHub.hubRights.contains(.manage) else { continue }
            }
            hubs.append(HubBody(hub))
        }
        return try EdgeHTTP.json(HubsBody(hubs: hubs))
    }

    /// `POST /v1/hubs` `{"name", "limits"?}`: 201 with the hub and its two default keys' secrets
    /// (shown this once), `Location` its path. Manage on the hub default.
    func create(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        _ = try await requireManage(request, context, hub: nil)
        let body: CreateHubBody = try await Self.decode(request, config)
        let name = try EdgeHTTP.text(body.name, "name")
        // The whole request is checked before the hub is made: a refused one leaves nothing behind.
        let changes = body.limits?.changes ?? HubAdministration.Limits()
        try changes.check()
        AuditTrail.hub(name: name, id: "")
        let hub = try await auth.createHub(
            CreateHubRequest(name: name, maxInstallations: body.limits?.maxInstallations ?? 0),
            requestID: context.requestID)
        AuditTrail.hub(name: hub.name, id: hub.id)
        let limited: Hub
        let pushes: HubPushLimits
        do {
            (limited, pushes) = try await HubAdministration.limits(
                of: hub, changing: changes, auth: auth, dispatch: dispatch, requestID: context.requestID)
        } catch {
            // A service refused its part after the hub was made (or could not be reached): the
            // hub goes again, so a retry is not a 409 for a hub whose secrets nobody saw.
            _ = try? await HubAdministration.delete(
                name: hub.name, id: hub.id, auth: auth, registration: registration, dispatch: dispatch,
                requestID: context.requestID)
            throw error
        }
        let keys = try await auth.listHubKeys(ListHubKeysRequest(hub: hub.name), requestID: context.requestID).keys
        var created = try await detail(limited, pushes, context)
        created.keys = keys.map { KeyBody($0, endpoint: Self.endpoint(request)) }
        var response = try Self.secret(created, status: .created)
        response.headers[.location] = "/v1/hubs/\(Self.pathComponent(hub.name))"
        return response
    }

    /// A hub with its keys (no secrets), its limits and its credentials' status (read here).
    func detail(_ hub: Hub, _ pushes: HubPushLimits, _ context: EdgeRequestContext) async throws -> HubDetailBody {
        let credentials = try await dispatch.getHubCredentials(
            GetHubCredentialsRequest(hub: hub.id), requestID: context.requestID)
        return HubDetailBody(
            name: hub.name, id: hub.id, createdAtUnixMs: hub.createdAtUnixMs,
            keys: hub.keys.map { KeyBody($0, endpoint: nil) }, limits: LimitsBody(hub, pushes),
            credentials: CredentialsBody(credentials).platforms)
    }

    // MARK: keys

    /// `PUT /v1/hubs/{hub}/keys/{key}` `{"rights": ["Listen", "Send", "Manage"]}`: a new key, 201
    /// with its secrets (shown this once); an existing key's rights changed, 200 without them.
    func setKey(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let hub = try await managed(request, context)
        let name = try Self.keyName(context)
        let body: KeyRightsBody = try await Self.decode(request, config)
        let rights: HubRights
        do {
            rights = try HubRights(names: body.rights)
        } catch {
            throw EdgeError(.badRequest, "rights must be one or more of Listen, Send and Manage")
        }
        guard !rights.isEmpty else { throw EdgeError(.badRequest, "a key needs at least one right") }
        AuditTrail.detail("rights: \(rights.names.joined(separator: ", "))")
        let exists = hub.keys.contains { $0.name == name }
        let key = try await auth.setHubKey(
            SetHubKeyRequest(hub: hub.name, name: name, rights: rights.proto), requestID: context.requestID)
        if exists { return try EdgeHTTP.json(KeyBody(key, endpoint: nil)) }
        var response = try Self.secret(KeyBody(key, endpoint: Self.endpoint(request)), status: .created)
        response.headers[.location] = "/v1/hubs/\(Self.pathComponent(hub.name))/keys/\(Self.pathComponent(name))"
        return response
    }

    // MARK: credentials

    /// `PUT /v1/hubs/{hub}/credentials/{platform}` with the platform's settings as JSON strings:
    /// apns `key` (the .p8's PEM), `keyId`, `teamId`, `topic`, `environment`?, or `certificate`
    /// (the .p12 or PEM file in base64), `certificatePassword`?, `topic`?, `environment`?; fcm
    /// `serviceAccount` (the JSON file's text); wns `clientId`, `clientSecret`; browser `vapidKey`
    /// (PEM), `subject`. Checked by herald-dispatch now; 200 with every platform's status.
    func setCredentials(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let hub = try await managed(request, context)
        let platform = try Self.platform(context)
        let body: [String: String] = try await Self.decode(request, config)
        var settings: [String: String] = [:]
        for (name, value) in body {
            let setting = Self.settingName(name)
            if setting == "url" || setting == "token-url", !config.testMode {
                throw EdgeError(.badRequest, "\(name) is taken only by an edge in test-mode (a test double's address)")
            }
            settings[setting] = try EdgeHTTP.text(value, name)
        }
        let setRequest: SetHubCredentialsRequest
        do {
            setRequest = try SetHubCredentialsRequest(hub: hub.id, platform: platform, settings: settings)
        } catch let error as ServiceError {
            // Name the setting as this API spells it.
            throw EdgeError(.badRequest, Self.camelCaseNames(in: error.message))
        }
        let answer = try await dispatch.setHubCredentials(setRequest, requestID: context.requestID)
        return try EdgeHTTP.json(CredentialsBody(answer))
    }

    /// "key-id" → keyId, as this API's JSON spells the CLI's setting names.
    static func camelCaseNames(in text: String) -> String {
        var result = ""
        var upper = false
        for character in text {
            if character == "-", let last = result.last, last.isLetter {
                upper = true
                continue
            }
            result += upper ? character.uppercased() : String(character)
            upper = false
        }
        return result
    }

    /// keyId → "key-id": the CLI's setting names, which the typed request is built from.
    static func settingName(_ name: String) -> String {
        var result = ""
        for character in name {
            if character.isUppercase {
                result += "-" + character.lowercased()
            } else {
                result.append(character)
            }
        }
        return result
    }

    // MARK: limits

    /// `PATCH /v1/hubs/{hub}/limits` with any of the limits (0: none); the others stay. Manage on
    /// the hub default only: on a shared deployment the operator sets what a tenant may use, and
    /// a tenant (Manage on its hub) reads its limits but does not change them.
    func setLimits(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let name = try Self.hubName(context)
        do {
            _ = try await requireManage(request, context, hub: nil)
        } catch let error as EdgeError where error.status == .forbidden {
            throw EdgeError(
                .forbidden,
                "changing a hub's limits needs the Manage right on the hub default (the operator's); Manage on the hub reads them"
            )
        }
        let hub = try await auth.getHub(GetHubRequest(name: name), requestID: context.requestID)
        AuditTrail.hub(name: hub.name, id: hub.id)
        let body: LimitsChangeBody = try await Self.decode(request, config)
        AuditTrail.detail(body.changes.auditDetail)
        let (changed, pushes) = try await HubAdministration.limits(
            of: hub, changing: body.changes, auth: auth, dispatch: dispatch, requestID: context.requestID)
        return try EdgeHTTP.json(LimitsBody(changed, pushes))
    }

    // MARK: audit

    /// `GET /v1/audit[?hub=…][&after=…][&limit=…]`: the audit trail, oldest first, a page at a
    /// time. Every record for Manage on the hub default; with `hub`, that hub's records (by its
    /// id: not those of a deleted hub of the same name) for Manage on it.
    func auditTrail(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        let after = try Self.queryNumber(query.get("after"), "after", in: 0...Int64.max) ?? 0
        let limit = try Self.queryNumber(query.get("limit"), "limit", in: 1...1000) ?? 100
        let list: ListAuditRequest
        if let name = query.get("hub") {
            let hubName = try EdgeHTTP.text(name, "hub")
            _ = try await requireManage(request, context, hub: hubName)
            let hub = try await auth.getHub(GetHubRequest(name: hubName), requestID: context.requestID)
            list = ListAuditRequest(scope: .hub, hubID: hub.id, afterSeq: after, limit: Int32(clamping: limit))
        } else {
            _ = try await requireManage(request, context, hub: nil)
            list = ListAuditRequest(scope: .all, afterSeq: after, limit: Int32(clamping: limit))
        }
        let page = try await auth.listAudit(list, requestID: context.requestID)
        return try EdgeHTTP.json(
            AuditBody(
                records: page.records.map(AuditRecordJSON.init),
                nextAfter: page.nextAfterSeq == 0 ? nil : page.nextAfterSeq,
                head: AuditBody.Head(seq: page.headSeq, hash: page.headHash)))
    }

    /// A whole number of the query within `range`, or nil when absent; 400 otherwise.
    static func queryNumber(_ text: String?, _ name: String, in range: ClosedRange<Int64>) throws -> Int64? {
        guard let text else { return nil }
        guard text.utf8.count <= 20, let value = Int64(text), range.contains(value) else {
            throw EdgeError(
                .badRequest, "\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    // MARK: HTTP pieces

    static func hubName(_ context: EdgeRequestContext) throws -> String {
        try EdgeHTTP.text(try context.parameters.require("hub"), "hub")
    }

    static func keyName(_ context: EdgeRequestContext) throws -> String {
        try EdgeHTTP.text(try context.parameters.require("key"), "key")
    }

    /// The credentials platform the path names (the console's forms read it here too).
    static func platform(_ context: EdgeRequestContext) throws -> Platform {
        guard let platform = SetHubCredentialsRequest.platform(named: try context.parameters.require("platform")) else {
            throw EdgeError(.badRequest, "platform must be apns, fcm, wns or browser")
        }
        return platform
    }

    /// A body of JSON `T`, within the edge's body limit: 400 naming what is wrong.
    static func decode<T: Decodable>(_ request: Request, _ config: EdgeConfig) async throws -> T {
        let data = try await EdgeHTTP.collect(request, upTo: config.maxBodyBytes)
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context) {
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            throw EdgeError(.badRequest, "the body's \(path.isEmpty ? "value" : path) has the wrong type")
        } catch let DecodingError.keyNotFound(key, _) {
            throw EdgeError(.badRequest, "the body lacks \(key.stringValue)")
        } catch {
            throw EdgeError(.badRequest, "the body must be a JSON object")
        }
    }

    /// The edge's address as this request reached it, for connection strings: `sb://host/`.
    static func endpoint(_ request: Request) -> String {
        // The caller's own Host, back to the caller: only a host name's characters, so that it
        // cannot add fields to the connection string.
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]")
        let host = request.head.authority ?? ""
        let valid = !host.isEmpty && host.count <= 255 && host.allSatisfy { allowed.contains($0) }
        return "sb://\(valid ? host : "localhost")/"
    }

    /// A JSON answer holding secrets: never stored by a cache.
    static func secret(_ body: some Encodable, status: HTTPResponse.Status) throws -> Response {
        var response = try EdgeHTTP.json(body, status: status)
        response.headers[.cacheControl] = "no-store"
        return response
    }

    static func pathComponent(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(["/"])) ?? text
    }
}

// MARK: bodies

struct HubBody: Encodable {
    var name: String
    var id: String
    var createdAtUnixMs: Int64
    var keys: [KeyBody]

    init(_ hub: Hub) {
        name = hub.name
        id = hub.id
        createdAtUnixMs = hub.createdAtUnixMs
        keys = hub.keys.map { KeyBody($0, endpoint: nil) }
    }
}

struct HubsBody: Encodable {
    var hubs: [HubBody]
}

struct HubDetailBody: Encodable {
    var name: String
    var id: String
    var createdAtUnixMs: Int64
    var keys: [KeyBody]
    var limits: LimitsBody
    var credentials: [CredentialBody]
}

/// A key: its secrets and connection strings only when made or rotated.
struct KeyBody: Encodable {
    var name: String
    var rights: [String]
    var primaryKey: String?
    var secondaryKey: String?
    var primaryConnectionString: String?
    var secondaryConnectionString: String?

    /// With `endpoint`, the secrets and connection strings (`key` must carry them).
    init(_ key: HubKey, endpoint: String?) {
        name = key.name
        rights = key.hubRights.names
        guard let endpoint, !key.primaryKey.isEmpty else { return }
        primaryKey = key.primaryKey
        secondaryKey = key.secondaryKey
        primaryConnectionString = HubAdministration.connectionString(endpoint: endpoint, key: key)
        secondaryConnectionString = HubAdministration.connectionString(endpoint: endpoint, key: key, secondary: true)
    }
}

struct KeyRightsBody: Decodable {
    var rights: [String]
}

struct DeletedBody: Encodable {
    var name: String
    var devices: Int64
    var sends: Int64
    var cancelledSends: Int64
}

struct CreateHubBody: Decodable {
    var name: String
    var limits: LimitsChangeBody?
}

/// A change of limits: the fields given are set (0: none), the others stay.
struct LimitsChangeBody: Decodable {
    var maxInstallations: Int64?
    var requestsPerSecond: Int64?
    var requestBurst: Int64?
    var pushesPerDay: Int64?
    var pushesPerMonth: Int64?
    var maxConcurrentPushes: Int64?
    var weight: Int64?

    var changes: HubAdministration.Limits {
        HubAdministration.Limits(
            maxInstallations: maxInstallations, requestsPerSecond: requestsPerSecond, requestBurst: requestBurst,
            pushesPerDay: pushesPerDay, pushesPerMonth: pushesPerMonth, maxConcurrentPushes: maxConcurrentPushes,
            weight: weight)
    }
}

struct LimitsBody: Encodable {
    var maxInstallations: Int64
    var requestsPerSecond: Int64
    var requestBurst: Int64
    var pushesPerDay: Int64
    var pushesPerMonth: Int64
    var maxConcurrentPushes: Int64
    var weight: Int64
    var pushesToday: Int64
    var pushesThisMonth: Int64

    init(_ hub: Hub, _ pushes: HubPushLimits) {
        maxInstallations = hub.maxInstallations
        requestsPerSecond = hub.requestsPerSecond
        requestBurst = hub.requestBurst
        pushesPerDay = pushes.pushesPerDay
        pushesPerMonth = pushes.pushesPerMonth
        maxConcurrentPushes = pushes.maxConcurrentPushes
        weight = max(pushes.weight, 1)
        pushesToday = pushes.pushesToday
        pushesThisMonth = pushes.pushesThisMonth
    }
}

/// What delivers a platform of a hub: never a secret.
struct CredentialBody: Encodable {
    var platform: String
    /// hub, deployment, inbox or missing.
    var source: String
    var summary: String
    var updatedAtUnixMs: Int64?
    /// When an APNs certificate ends.
    var expiresAtUnixMs: Int64?
    var failing: Bool
    var lastError: String?
    var lastErrorAtUnixMs: Int64?

    init(_ platform: HubPlatformCredentials) {
        self.platform = platform.platform.name
        source = platform.source.word
        summary = platform.summary
        updatedAtUnixMs = platform.updatedAtUnixMs > 0 ? platform.updatedAtUnixMs : nil
        expiresAtUnixMs = platform.expiresAtUnixMs > 0 ? platform.expiresAtUnixMs : nil
        failing = platform.failing
        lastError = platform.lastError.isEmpty ? nil : platform.lastError
        lastErrorAtUnixMs = platform.lastErrorAtUnixMs > 0 ? platform.lastErrorAtUnixMs : nil
    }
}

struct CredentialsBody: Encodable {
    var platforms: [CredentialBody]

    init(_ answer: HubCredentialsResponse) {
        platforms = answer.platforms.map(CredentialBody.init)
    }
}

/// `GET /v1/audit`: a page of the audit trail, and its head (what `herald audit verify` checks
/// against).
struct AuditBody: Encodable {
    struct Head: Encodable {
        var seq: Int64
        var hash: String
    }

    var records: [AuditRecordJSON]
    /// The `after` of the next page; absent on the last.
    var nextAfter: Int64?
    var head: Head
}
