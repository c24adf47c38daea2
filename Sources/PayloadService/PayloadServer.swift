import Foundation
public import HeraldModel
import HeraldProto
public import HeraldRPC
import HeraldSQL
public import HeraldService

/// Settings of herald-payload, besides ``RuntimeConfig``'s.
///
/// - `default-ttl-seconds` (`HERALD_DEFAULT_TTL_SECONDS`, 604800 = 7 days): lifetime of stored content.
/// - `max-content-bytes` (`HERALD_MAX_CONTENT_BYTES`, 5242880): largest content accepted.
/// - `purge-interval-seconds` (`HERALD_PURGE_INTERVAL_SECONDS`, 60): how often expired content is
///   deleted from the database (it is 404 from the moment it expires either way).
public struct PayloadConfig: Sendable {
    public static let keys: Set<String> = ["default-ttl-seconds", "max-content-bytes", "purge-interval-seconds"]
    public var defaultTTL: Duration
    public var maxContentBytes: Int
    public var purgeInterval: Duration

    public init(reader: ConfigReader) throws {
        let defaultTTLSeconds = Int64(try reader.int("default-ttl-seconds", default: 7 * 24 * 3600))
        maxContentBytes = try reader.int("max-content-bytes", default: 5 << 20)
        let purgeSeconds = try reader.int("purge-interval-seconds", default: 60)
        guard purgeSeconds > 0 else { throw ConfigError("purge-interval-seconds must be positive") }
        purgeInterval = .seconds(purgeSeconds)
        guard (1...(RPCLimits.maxMessageBytes - 4096)).contains(maxContentBytes) else {
            throw ConfigError(
                "max-content-bytes must be 1...\(RPCLimits.maxMessageBytes - 4096) (the RPC message limit)")
        }
        guard (1...ContentLimits.maxTTLSeconds).contains(defaultTTLSeconds) else {
            throw ConfigError("default-ttl-seconds must be 1...\(ContentLimits.maxTTLSeconds) (one year)")
        }
        defaultTTL = .seconds(defaultTTLSeconds)
    }
}

/// The RPC handlers of herald-payload.
public struct PayloadHandlers: PayloadServiceHandler {
    public let store: PayloadStore
    /// `test-mode`: whether ResetForTests may run.
    public let testMode: Bool

    public init(store: PayloadStore, testMode: Bool = false) {
        self.store = store
        self.testMode = testMode
    }

    public func storePayload(_ request: StorePayloadRequest, context: RPCContext) async throws -> StorePayloadResponse {
        try await store.store(request)
    }

    public func fetchPayload(_ request: FetchPayloadRequest, context: RPCContext) async throws -> FetchPayloadResponse {
        // Started on the event loop (see `definition`): the read never waits; the first read's
        // write may (behind a purge, say), so it leaves the loop.
        let answer = try await store.read(id: request.id, requester: request.requester)
        if !answer.read { try await context.offEventLoop { [store] in try await store.markRead(id: request.id) } }
        return answer
    }

    public func deletePayload(_ request: DeletePayloadRequest, context: RPCContext) async throws
        -> DeletePayloadResponse
    {
        try await store.delete(id: request.id, recipient: request.recipient)
        return DeletePayloadResponse()
    }

    public func eraseUser(_ request: EraseUserRequest, context: RPCContext) async throws -> EraseUserResponse {
        try ExportJSON.checkPerson(user: request.user, hub: request.hub)
        let erased = try await store.eraseUser(request.user)
        context.logger.notice(
            "user's content erased",
            metadata: [
                "herald.user": "\(request.user)", "herald.removed": "\(erased.removed)",
                "herald.redacted": "\(erased.redacted)",
            ])
        return EraseUserResponse(removed: erased.removed, redacted: erased.redacted)
    }

    public func exportUser(_ request: ExportUserRequest, context: RPCContext) async throws -> ExportPage {
        let limit = try ExportJSON.check(request)
        let after = request.after.isEmpty ? 0 : Int64(request.after)
        guard let after, after >= 0 else { throw ServiceError.invalidArgument("after must be a content id") }
        struct Item: Encodable {
            var id: Int64
            /// "received": addressed to the user, with its content; "sent": by the user to someone
            /// else, without it.
            var direction: String
            var sender: String?
            var recipient: String?
            var kind: String
            var contentType: String
            var message: String
            var richType: String
            var read: Bool
            var createdAt: String
            var expiresAt: String
            var content: String?
        }
        let page = try await store.exportPage(user: request.user, after: after, limit: limit)
        let items = try page.map { row in
            let received = row.recipient == request.user
            return try ExportJSON.encode(
                Item(
                    id: row.id, direction: received ? "received" : "sent", sender: received ? row.sender : nil,
                    recipient: received ? nil : row.recipient, kind: row.kind == .rich ? "rich" : "secure",
                    contentType: row.contentType, message: row.message, richType: row.richType, read: row.read,
                    createdAt: ExportJSON.time(row.createdAt), expiresAt: ExportJSON.time(row.expiresAt),
                    content: received ? Data(row.content).base64EncodedString() : nil))
        }
        return ExportPage(items: items, next: page.count == limit ? page.last.map { String($0.id) } ?? "" : "")
    }

    public func resetForTests(_ request: ResetForTestsRequest, context: RPCContext) async throws
        -> ResetForTestsResponse
    {
        try TestMode.require(testMode, service: .payload)
        return ResetForTestsResponse(deleted: try await store.deleteEverything())
    }
}

/// herald-payload's start-up.
public enum PayloadServer {
    /// What herald-payload runs; `HeraldProcess.main` runs it as a process, tests build it in-process.
    public static let definition = ServiceDefinition.rpc(.payload, extraKeys: PayloadConfig.keys) {
        context -> RPCServiceParts in
        let config = try PayloadConfig(reader: context.reader)
        let rules = PayloadRules(defaultTTL: config.defaultTTL, maxContentBytes: config.maxContentBytes)
        let database = try context.openDatabase(sqlite: HeraldDatabase.secureDeleteConfiguration)
        let box = try await context.secretBox(purpose: "secure and rich content")
        let store = try await PayloadStore(db: database.sql, rules: rules, box: box)
        var table = MethodTable()
        PayloadHandlers(store: store, testMode: context.config.testMode).register(into: &table)
        table.startOnEventLoop(PayloadServiceMethods.fetchPayload)
        let purge = Periodic("payload purge", every: config.purgeInterval, logger: context.logger) {
            let purged = try await store.purgeExpired()
            if purged > 0 { context.logger.info("purged expired content", metadata: ["herald.count": "\(purged)"]) }
        }
        let keeper = box.map { $0.keeper(logger: context.logger) { try await store.rewrapAll() } }
        return RPCServiceParts(
            table: table, background: database.services + [purge] + (keeper.map { [$0] } ?? []),
            healthChecks: [database.healthCheck])
    }
}
