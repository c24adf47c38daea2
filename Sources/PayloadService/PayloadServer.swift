import GRDB
import HeraldProto
public import HeraldRPC

/// Settings of herald-payload, besides ``RuntimeConfig``'s.
///
/// - `default-ttl-seconds` (`HERALD_DEFAULT_TTL_SECONDS`, 604800 = 7 days): lifetime of stored content.
/// - `max-content-bytes` (`HERALD_MAX_CONTENT_BYTES`, 5242880): largest content accepted.
public struct PayloadConfig: Sendable {
    public static let keys: Set<String> = ["default-ttl-seconds", "max-content-bytes"]
    public var defaultTTLSeconds: Int64
    public var maxContentBytes: Int

    public init(reader: ConfigReader) throws {
        defaultTTLSeconds = Int64(try reader.int("default-ttl-seconds", default: 7 * 24 * 3600))
        maxContentBytes = try reader.int("max-content-bytes", default: 5 << 20)
        guard defaultTTLSeconds > 0 else { throw ConfigError("default-ttl-seconds must be positive") }
    }
}

/// The RPC handlers of herald-payload.
public struct PayloadHandlers: Sendable {
    public let store: PayloadStore

    public init(store: PayloadStore) {
        self.store = store
    }

    public func register(into table: inout MethodTable) {
        table.register(PayloadServiceMethods.storePayload) { request, _ in try store.store(request) }
        table.register(PayloadServiceMethods.fetchPayload) { request, _ in
            try store.fetch(id: request.id, requester: request.requester)
        }
    }
}

/// herald-payload's start-up.
public enum PayloadServer {
    public static func main() async -> Never {
        await HeraldProcess.main(rpcService: "payload", extraKeys: PayloadConfig.keys) { context in
            let config = try PayloadConfig(reader: context.reader)
            let pool = try DatabasePool(path: context.config.databasePath, configuration: HeraldDatabase.configuration)
            let store = try PayloadStore(
                db: pool, defaultTTLSeconds: config.defaultTTLSeconds, maxContentBytes: config.maxContentBytes)
            var table = MethodTable()
            PayloadHandlers(store: store).register(into: &table)
            return table
        }
    }
}
