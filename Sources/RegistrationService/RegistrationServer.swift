import Foundation
import GRDB
public import HeraldModel
import HeraldProto
public import HeraldRPC
public import HeraldService
import HeraldTelemetry
import NotificationHubs

/// The RPC handlers of herald-registration over a ``RegistrationStore``.
public struct RegistrationHandlers: RegistrationServiceHandler {
    /// Registrations per StreamAudience message.
    public static let audienceBatchSize = 500
    public let store: any RegistrationStore
    /// Hosts WNS channel URIs and Web Push endpoints may point at.
    public let hosts: RegistrationRules.PushHosts
    /// `test-mode`: whether ResetForTests may run.
    public let testMode: Bool

    public init(store: any RegistrationStore, hosts: RegistrationRules.PushHosts = .init(), testMode: Bool = false) {
        self.store = store
        self.hosts = hosts
        self.testMode = testMode
    }

    public func resetForTests(_ request: ResetForTestsRequest, context: RPCContext) async throws
        -> ResetForTestsResponse
    {
        try TestMode.require(testMode, service: .registration)
        return ResetForTestsResponse(deleted: try await store.deleteEverything())
    }

    public func createRegistrationId(
        _ request: CreateRegistrationIdRequest, context: RPCContext
    ) async throws -> CreateRegistrationIdResponse {
        try Self.requireOwner(request.owner)
        guard request.handle.utf8.count <= 4096 else { throw ServiceError.invalidArgument("handle is too long") }
        return CreateRegistrationIdResponse(
            registrationID: try await store.createID(owner: request.owner, handle: request.handle))
    }

    public func upsertRegistration(
        _ request: UpsertRegistrationRequest, context: RPCContext
    ) async throws -> UpsertRegistrationResponse {
        try Self.requireOwner(request.owner)
        try RegistrationRules.validateHandle(request.handle, platform: request.platform, hosts: hosts)
        let tags = try RegistrationRules.validateTags(request.tags)
        let registration = try await store.upsert(
            owner: request.owner, id: request.registrationID, platform: request.platform,
            handle: request.handle, tags: tags)
        return UpsertRegistrationResponse(registration: registration)
    }

    public func deleteRegistration(
        _ request: DeleteRegistrationRequest, context: RPCContext
    ) async throws -> DeleteRegistrationResponse {
        try Self.requireOwner(request.owner)
        try await store.delete(owner: request.owner, id: request.registrationID)
        return DeleteRegistrationResponse()
    }

    public func listRegistrations(
        _ request: ListRegistrationsRequest, context: RPCContext
    ) async throws -> ListRegistrationsResponse {
        try Self.requireOwner(request.owner)
        return ListRegistrationsResponse(registrations: try await store.list(owner: request.owner))
    }

    public func checkHandles(_ request: CheckHandlesRequest, context: RPCContext) async throws -> CheckHandlesResponse {
        guard request.handles.count <= 1000 else {
            throw ServiceError.invalidArgument("at most 1000 handles, got \(request.handles.count)")
        }
        for (index, handle) in request.handles.enumerated() {
            do {
                guard handle.utf8.count <= 4096 else { throw ServiceError.invalidArgument("handle is too long") }
                try RegistrationRules.validateHandle(handle, platform: request.platform, hosts: hosts)
            } catch let error as ServiceError {
                throw ServiceError.invalidArgument("device handle \(index + 1): \(error.message)")
            }
        }
        return CheckHandlesResponse()
    }

    public func removeHandle(_ request: RemoveHandleRequest, context: RPCContext) async throws -> RemoveHandleResponse {
        guard request.platform != .unspecified, !request.handle.isEmpty else {
            throw ServiceError.invalidArgument("platform and handle are required")
        }
        let removed = try await store.removeHandle(
            platform: request.platform, handle: request.handle, invalidSince: request.invalidSinceUnixMs)
        // The handle itself stays out of the log: it addresses a device.
        context.logger.info(
            "removed dead push handle",
            metadata: ["herald.platform": "\(request.platform.name)", "herald.count": "\(removed)"])
        return RemoveHandleResponse(removed: Int64(removed))
    }

    public func streamAudience(
        _ request: StreamAudienceRequest, context: RPCContext, responses: ResponseStream<AudienceBatch>
    ) async throws {
        let hub = Names.hub(request.hub)
        let expression: TagExpression?
        if request.broadcast {
            guard request.tag.isEmpty else { throw ServiceError.invalidArgument("a broadcast names no tag") }
            expression = nil
        } else {
            guard !request.tag.isEmpty else { throw ServiceError.invalidArgument("tag is required") }
            expression = try TagExpression.validated(request.tag, field: "tag")
        }
        var after = ""
        while true {
            try Task.checkCancellation()
            let page = try await HeraldTracing.span("audience.page") { span in
                let page =
                    if let expression {
                        try await store.audience(
                            expression: expression, platform: request.platform, hub: hub,
                            templates: request.templates, after: after, limit: Self.audienceBatchSize)
                    } else {
                        try await store.audience(
                            broadcast: hub, platform: request.platform, templates: request.templates, after: after,
                            limit: Self.audienceBatchSize)
                    }
                span?.setAttribute("herald.hub", hub)
                span?.setAttribute("herald.devices", page.count)
                return page
            }
            guard let last = page.last else { return }
            try await responses.send(AudienceBatch(registrations: page))
            if page.count < Self.audienceBatchSize { return }
            after = last.registrationID
        }
    }

    // MARK: installations

    public func putInstallation(_ request: PutInstallationRequest, context: RPCContext) async throws
        -> InstallationResponse
    {
        let installation: Installation
        if let given = request.installation {
            installation = try Installation(request: given, id: request.installationID)
            try installation.validate(hosts: hosts)
        } else {
            // A caller from before `installation`, with NH's JSON (until 2027-03-01).
            installation = try Installation.parse(request.json, id: request.installationID, hosts: hosts)
        }
        guard request.maxInstallations >= 0 else {
            throw ServiceError.invalidArgument("max_installations must not be negative")
        }
        let stored = try await store.putInstallation(
            hub: Names.hub(request.hub), installation, maxInstallations: request.maxInstallations)
        return request.emptyAnswer ? InstallationResponse() : try Self.answer(stored, json: request.installation == nil)
    }

    public func patchInstallation(_ request: PatchInstallationRequest, context: RPCContext) async throws
        -> InstallationResponse
    {
        try Installation.validateID(request.installationID)
        let operations = request.operations
        let legacy = request.patch
        let installation = try await store.patchInstallation(hub: Names.hub(request.hub), id: request.installationID) {
            installation in
            if operations.isEmpty {
                // A caller from before `operations`, with NH's JSON-Patch (until 2027-03-01).
                try installation.apply(patch: legacy, hosts: hosts)
            } else {
                try installation.apply(operations: operations, hosts: hosts)
            }
        }
        return request.emptyAnswer ? InstallationResponse() : try Self.answer(installation, json: operations.isEmpty)
    }

    /// An installation answered: typed, and as NH's JSON too for callers from before the typed
    /// field (until 2027-03-01). A caller that sent a typed request reads the typed answer, so a
    /// PUT or PATCH of one gets no JSON: writing and reading it again was 3% of an NH PUT's
    /// instructions.
    static func answer(_ installation: Installation, json: Bool = true) throws -> InstallationResponse {
        InstallationResponse(json: json ? try installation.json() : [], installation: installation.message)
    }

    public func getInstallation(_ request: GetInstallationRequest, context: RPCContext) async throws
        -> InstallationResponse
    {
        try Installation.validateID(request.installationID)
        guard let installation = try await store.installation(hub: Names.hub(request.hub), id: request.installationID)
        else {
            throw ServiceError.notFound("Installation not found.")
        }
        return try Self.answer(installation)
    }

    public func deleteInstallation(
        _ request: DeleteInstallationRequest, context: RPCContext
    ) async throws -> DeleteInstallationResponse {
        try Installation.validateID(request.installationID)
        return DeleteInstallationResponse(
            deleted: try await store.deleteInstallation(hub: Names.hub(request.hub), id: request.installationID))
    }

    public func listInstallations(
        _ request: ListInstallationsRequest, context: RPCContext
    ) async throws -> ListInstallationsResponse {
        try request.scope.requireHub("listing a hub's installations")
        guard (0...1000).contains(request.limit) else { throw ServiceError.invalidArgument("limit must be 1 to 1000") }
        let limit = request.limit == 0 ? 100 : Int(request.limit)
        var after = ""
        if !request.continuationToken.isEmpty {
            guard request.continuationToken.utf8.count <= 1024,
                let decoded = Base64URL.decode(request.continuationToken).flatMap({
                    $0.withUnsafeBytes { validatedUTF8($0) }
                })
            else {
                throw ServiceError.invalidArgument("continuationToken is not one this service gave")
            }
            after = decoded
        }
        let page = try await store.listInstallations(
            hub: Names.hub(request.hub),
            expression: request.tag.isEmpty ? nil : try TagExpression.validated(request.tag, field: "tag"),
            userID: request.userID.isEmpty ? nil : request.userID, platform: request.platform, after: after,
            limit: limit + 1)
        let more = page.count > limit
        let shown = page.prefix(limit)
        return ListInstallationsResponse(
            installations: try shown.map { try $0.json() },
            continuationToken: more ? Base64URL.encode((shown.last?.installationID ?? "").utf8) : "",
            items: shown.map(\.message))
    }

    // MARK: NH registrations

    public func putHubRegistration(_ request: PutHubRegistrationRequest, context: RPCContext) async throws
        -> HubRegistrationResponse
    {
        guard let registration = request.registration else {
            throw ServiceError.invalidArgument("registration is required")
        }
        guard request.ifMatch >= 0, request.maxRegistrations >= 0 else {
            throw ServiceError.invalidArgument("if_match and max_registrations must not be negative")
        }
        let (stored, created) = try await store.putHubRegistration(
            hub: Names.hub(request.hub),
            HubRegistrationRules.validated(registration, hosts: hosts, trusted: request.trusted),
            ifMatch: request.ifMatch, createOnly: request.createOnly, maxRegistrations: request.maxRegistrations)
        return HubRegistrationResponse(registration: stored, created: created)
    }

    public func getHubRegistration(_ request: GetHubRegistrationRequest, context: RPCContext) async throws
        -> HubRegistrationResponse
    {
        try HubRegistrationRules.validateID(request.registrationID)
        guard
            let registration = try await store.hubRegistration(hub: Names.hub(request.hub), id: request.registrationID)
        else {
            throw ServiceError.notFound("Registration not found.")
        }
        return HubRegistrationResponse(registration: registration)
    }

    public func deleteHubRegistration(_ request: DeleteHubRegistrationRequest, context: RPCContext) async throws
        -> DeleteHubRegistrationResponse
    {
        try HubRegistrationRules.validateID(request.registrationID)
        guard request.ifMatch >= 0 else { throw ServiceError.invalidArgument("if_match must not be negative") }
        try await store.deleteHubRegistration(
            hub: Names.hub(request.hub), id: request.registrationID, ifMatch: request.ifMatch)
        return DeleteHubRegistrationResponse()
    }

    public func listHubRegistrations(_ request: ListHubRegistrationsRequest, context: RPCContext) async throws
        -> ListHubRegistrationsResponse
    {
        guard (0...HubRegistrationRules.maxPage).contains(Int(request.limit)) else {
            throw ServiceError.invalidArgument("limit must be 1 to \(HubRegistrationRules.maxPage)")
        }
        guard request.handle.isEmpty || request.tag.isEmpty else {
            throw ServiceError.invalidArgument("a listing is by handle or by tag, not both")
        }
        guard request.handle.utf8.count <= 4096 else { throw ServiceError.invalidArgument("handle too long") }
        // Checked here, where the registrations are read, whatever the edge decided.
        switch request.scope {
        case .hub: break
        case .handle where !request.handle.isEmpty: break
        case .handle: throw ServiceError(.permissionDenied, "a READ_SCOPE_HANDLE listing needs its handle")
        default: throw ServiceError(.permissionDenied, "listing registrations needs a scope: one handle or the hub")
        }
        let after = try HubRegistrationRules.FeedCursor(token: request.after)
        if !request.tag.isEmpty, !Names.isValidTag(request.tag, maxLength: RegistrationRules.maxTagLength) {
            throw ServiceError.invalidArgument("tag \"\(request.tag.prefix(130))\" is not a valid tag")
        }
        let limit = request.limit == 0 ? HubRegistrationRules.defaultPage : Int(request.limit)
        let page = try await store.listHubRegistrations(
            hub: Names.hub(request.hub), handle: request.handle.isEmpty ? nil : request.handle,
            tag: request.tag.isEmpty ? nil : request.tag, after: after, limit: limit + 1)
        // A page is also cut at about 4 MB: registrations carry templates of up to the edge's
        // body limit each, and a thousand of them would not fit one RPC message (16 MB).
        var shown: [HubRegistration] = []
        var last = after
        var bytes = 0
        for (registration, cursor) in page.prefix(limit) {
            let size = registration.bodyTemplate.utf8.count + registration.handle.utf8.count + 1024
            if !shown.isEmpty, bytes + size > HubRegistrationRules.maxPageBytes { break }
            shown.append(registration)
            last = cursor
            bytes += size
        }
        let more = page.count > shown.count
        return ListHubRegistrationsResponse(registrations: shown, nextAfter: more ? last.token : "")
    }

    public func listDevices(_ request: ListDevicesRequest, context: RPCContext) async throws -> ListDevicesResponse {
        try request.scope.requireHub("listing a hub's devices")
        guard (0...500).contains(request.limit) else { throw ServiceError.invalidArgument("limit must be 1 to 500") }
        let limit = request.limit == 0 ? 50 : Int(request.limit)
        guard request.handlePrefix.utf8.count <= 4096, request.user.utf8.count <= 256, request.afterID.utf8.count <= 256
        else {
            throw ServiceError.invalidArgument("user, handle_prefix or after_id is too long")
        }
        let hub = Names.hub(request.hub)
        var page = try await store.devices(
            hub: hub, user: request.user.isEmpty ? nil : request.user,
            expression: request.tag.isEmpty ? nil : try TagExpression.validated(request.tag, field: "tag"),
            platform: request.platform,
            handlePrefix: request.handlePrefix.isEmpty ? nil : request.handlePrefix, after: request.afterID,
            limit: limit + 1)
        let more = page.count > limit
        if more { page.removeLast() }
        for index in page.indices { page[index].hub = hub }
        return ListDevicesResponse(devices: page, nextAfterID: more ? page.last?.registrationID ?? "" : "")
    }

    public func exportDevices(
        _ request: ExportDevicesRequest, context: RPCContext, responses: ResponseStream<ExportBatch>
    ) async throws {
        try request.scope.requireHub("exporting a hub's devices")
        var after = ""
        while true {
            try Task.checkCancellation()
            let page = try await store.exportPage(
                hub: Names.hub(request.hub), after: after, limit: Self.audienceBatchSize)
            if page.count > 0 { try await responses.send(ExportBatch(ndjson: page.lines)) }
            guard page.count == Self.audienceBatchSize, let last = page.last else { return }
            after = last
        }
    }

    public func listUserDevices(_ request: ListUserDevicesRequest, context: RPCContext) async throws
        -> ListUserDevicesResponse
    {
        try ExportJSON.checkPerson(user: request.user, hub: request.hub)
        guard request.after.utf8.count <= 256 else { throw ServiceError.invalidArgument("after is over 256 bytes") }
        return ListUserDevicesResponse(
            devices: try await store.userDevices(
                user: request.user, hub: request.hub, after: request.after, limit: Int(request.limit)))
    }

    public func eraseUserDevices(_ request: EraseUserDevicesRequest, context: RPCContext) async throws
        -> EraseUserResponse
    {
        try ExportJSON.checkPerson(user: request.user, hub: request.hub)
        guard request.registrationIds.allSatisfy({ $0.utf8.count <= 256 }) else {
            throw ServiceError.invalidArgument("a registration id is longer than 256 bytes")
        }
        let removed = try await store.eraseUserDevices(
            user: request.user, hub: request.hub, ids: request.registrationIds)
        context.logger.notice(
            "user's devices erased",
            metadata: ["herald.user": "\(request.user)", "herald.hub": "\(request.hub)", "herald.count": "\(removed)"])
        return EraseUserResponse(removed: removed)
    }

    public func exportUserDevices(_ request: ExportUserRequest, context: RPCContext) async throws -> ExportPage {
        let limit = try ExportJSON.check(request)
        struct Item: Encodable {
            var registrationId: String
            var hub: String
            var platform: String
            var handle: String
            var tags: [String]
            var template: String?
            var expired: Bool
            var createdAt: String
            var updatedAt: String
        }
        let page = try await store.exportUserDevices(
            user: request.user, hub: request.hub, after: request.after, limit: limit)
        let items = try page.map { device in
            var item = try ExportJSON.encode(
                Item(
                    registrationId: device.id, hub: device.hub, platform: device.platform.name,
                    handle: device.handle, tags: device.tags, template: device.templateName, expired: device.expired,
                    createdAt: ExportJSON.time(device.createdAt), updatedAt: ExportJSON.time(device.updatedAt)))
            // An installation's (or template's) NH JSON as it is stored, not re-encoded.
            if let document = device.document, (try? JSONSerialization.jsonObject(with: Data(document))) != nil {
                item = Array("{\"nh\":".utf8) + document + [UInt8(ascii: ",")] + item.dropFirst()
            }
            return item
        }
        return ExportPage(items: items, next: page.count == limit ? page.last?.id ?? "" : "")
    }

    public func deleteHubDevices(_ request: DeleteHubDevicesRequest, context: RPCContext) async throws
        -> DeleteHubDevicesResponse
    {
        guard !request.hub.isEmpty, request.hub != Names.defaultHub else {
            throw ServiceError.failedPrecondition(
                "the hub default's devices are the tutorial's; delete them one by one")
        }
        let deleted = try await store.deleteHub(request.hub)
        context.logger.notice(
            "hub devices deleted", metadata: ["herald.hub": "\(request.hub)", "herald.count": "\(deleted)"])
        return DeleteHubDevicesResponse(deleted: Int64(deleted))
    }

    private static func requireOwner(_ owner: String) throws {
        guard !owner.isEmpty else { throw ServiceError.invalidArgument("owner is required") }
    }
}

/// Settings of herald-registration, besides ``RuntimeConfig``'s.
///
/// - `pending-ttl-seconds` (`HERALD_PENDING_TTL_SECONDS`, 86400): how long an id from
///   `POST api/register` waits for its first PUT; after that the PUT gets 410 and the device asks for
///   a new id. Expired ids are purged hourly.
/// - `wns-channel-hosts` (`HERALD_WNS_CHANNEL_HOSTS`, `notify.windows.com`) and
///   `webpush-endpoint-hosts` (`HERALD_WEBPUSH_ENDPOINT_HOSTS`, the browsers' push services):
///   comma-separated hosts a WNS channel URI or a Web Push endpoint may point at (each also matches
///   its subdomains). Tests add their loopback double.
public struct RegistrationConfig: Sendable {
    public static let keys: Set<String> = ["pending-ttl-seconds", "wns-channel-hosts", "webpush-endpoint-hosts"]
    public var pendingTTL: Duration
    public var hosts: RegistrationRules.PushHosts

    public init(reader: ConfigReader) throws {
        let pendingSeconds = try reader.int("pending-ttl-seconds", default: 24 * 3600)
        guard (1...366 * 86400).contains(pendingSeconds) else {
            throw ConfigError("pending-ttl-seconds must be 1...31622400")
        }
        pendingTTL = .seconds(pendingSeconds)
        func list(_ key: String, _ defaults: [String]) throws -> [String] {
            let hosts = reader.string(key, default: defaults.joined(separator: ","))
                .split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter {
                    !$0.isEmpty
                }
            guard !hosts.isEmpty else { throw ConfigError("\(key) must name at least one host") }
            return hosts
        }
        hosts = .init(
            wns: try list("wns-channel-hosts", RegistrationRules.PushHosts.defaultWNS),
            webPush: try list("webpush-endpoint-hosts", RegistrationRules.PushHosts.defaultWebPush))
    }
}

/// herald-registration's start-up.
public enum RegistrationServer {
    /// What herald-registration runs; `HeraldProcess.main` runs it as a process, tests build it in-process.
    public static let definition = ServiceDefinition.rpc(.registration, extraKeys: RegistrationConfig.keys) {
        context -> RPCServiceParts in
        let config = try RegistrationConfig(reader: context.reader)
        let database = try context.openDatabase()
        let store = try await SQLRegistrationStore(db: database.sql, pendingTTL: config.pendingTTL)
        var table = MethodTable()
        RegistrationHandlers(store: store, hosts: config.hosts, testMode: context.config.testMode).register(
            into: &table)
        let purge = Periodic("pending registration purge", every: .seconds(3600), logger: context.logger) {
            let purged = try await store.purgePending()
            if purged > 0 { context.logger.info("purged expired pending ids", metadata: ["herald.count": "\(purged)"]) }
        }
        return RPCServiceParts(
            table: table, background: database.services + [purge], healthChecks: [database.healthCheck])
    }
}
