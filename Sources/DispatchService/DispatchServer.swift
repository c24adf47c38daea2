import GRDB
import HeraldProto
public import HeraldRPC

/// Settings of herald-dispatch, besides ``RuntimeConfig``'s.
///
/// - `provider` (`HERALD_PROVIDER`, default `inbox`): where pushes go. Only `inbox` exists so far: it
///   records each push in dispatch's database instead of sending it.
public struct DispatchConfig: Sendable {
    public enum Provider: String, CaseIterable, Sendable { case inbox }
    public static let keys: Set<String> = ["provider"]
    public var provider: Provider

    public init(reader: ConfigReader) throws {
        provider = try reader.choice("provider", default: .inbox)
    }
}

/// The RPC handlers of herald-dispatch.
public struct DispatchHandlers: Sendable {
    public let dispatcher: Dispatcher
    public let inbox: InboxProvider

    public init(dispatcher: Dispatcher, inbox: InboxProvider) {
        self.dispatcher = dispatcher
        self.inbox = inbox
    }

    public func register(into table: inout MethodTable) {
        table.register(DispatchServiceMethods.send) { request, context in
            SendResponse(outcome: try await dispatcher.send(request, context: context))
        }
        table.register(DispatchServiceMethods.getOutcome) { request, _ in
            try dispatcher.outcome(of: request.notificationID, requester: request.requester)
        }
        table.register(DispatchServiceMethods.listInbox) { request, _ in
            guard request.limit >= 0, request.afterSequence >= 0 else {
                throw ServiceError.invalidArgument("limit and after_sequence must not be negative")
            }
            let limit = request.limit == 0 ? 100 : min(Int(request.limit), 1000)
            return ListInboxResponse(entries: try inbox.list(after: request.afterSequence, limit: limit, handle: request.handle))
        }
    }
}

/// herald-dispatch's start-up.
public enum DispatchServer {
    public static func main() async -> Never {
        await HeraldProcess.main(rpcService: "dispatch", peers: ["registration"], extraKeys: DispatchConfig.keys) { context -> RPCServiceParts in
            let config = try DispatchConfig(reader: context.reader)
            let pool = try DatabasePool(path: context.config.databasePath, configuration: HeraldDatabase.configuration)
            let inbox = try InboxProvider(db: pool)
            let provider: any PushProvider =
                switch config.provider {
                case .inbox: inbox
                }
            context.logger.notice("provider \(config.provider.rawValue): pushes are recorded, not sent")
            let dispatcher = try Dispatcher(db: pool, registrations: context.client("registration"), provider: provider)
            var table = MethodTable()
            DispatchHandlers(dispatcher: dispatcher, inbox: inbox).register(into: &table)
            return RPCServiceParts(table: table, healthChecks: [.database(pool)])
        }
    }
}
