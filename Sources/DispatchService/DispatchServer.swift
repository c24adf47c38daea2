import AsyncHTTPClient
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
public import HeraldService
import PushProviders
import ServiceLifecycle

/// Shuts the senders' HTTP client down when the process stops. Listed before the delivery worker,
/// so the service group (which stops services in reverse order) stops it after the worker's last
/// send; AsyncHTTPClient traps on a client released without a shutdown.
struct PushClientShutdown: Service {
    let client: PushClient

    func run() async throws {
        try? await gracefulShutdown()
        try await client.shutdown()
    }
}

/// herald-dispatch's start-up.
public enum DispatchServer {
    /// What herald-dispatch runs; `HeraldProcess.main` runs it as a process, tests build it in-process.
    public static let definition = ServiceDefinition.rpc(.dispatch, extraKeys: DispatchConfig.keys) {
        context -> RPCServiceParts in
        let config = try DispatchConfig(reader: context.reader)
        let database = try context.openDatabase()
        let outbox: Outbox
        let inbox: InboxProvider
        let credentialStore: HubCredentialStore
        let box = try await context.secretBox(purpose: "push credentials")
        switch database {
        case .sqlite(let sqlite):
            inbox = try InboxProvider(db: sqlite)
            outbox = try Outbox(db: sqlite, lease: config.lease)
            credentialStore = HubCredentialStore(db: sqlite, box: box)
        case .postgres(let postgres):
            let replica = config.replicaID ?? "\(ProcessInfo.processInfo.hostName):\(context.config.runtimeDir)"
            outbox = try await Outbox(postgres: postgres, replica: replica, lease: config.lease)
            inbox = InboxProvider(postgres: postgres)
            credentialStore = HubCredentialStore(db: postgres.sql, box: box)
            context.logger.notice(
                "outbox in PostgreSQL",
                metadata: [
                    "herald.replica": "\(replica)", "herald.lease_seconds": "\(config.lease.components.seconds)",
                ])
        }
        let abandoned = try await outbox.deleteAbandonedStaging()
        if abandoned > 0 {
            context.logger.notice(
                "deleted the staged audience of sends a previous process never committed",
                metadata: ["herald.count": "\(abandoned)"])
        }
        let client = PushHTTP.makeClient(extraCAFile: config.pushCAFile)
        let (senders, real): ([Platform: any PushSender], [Platform])
        do {
            (senders, real) = try await config.senders(inbox: inbox, client: client)
        } catch {
            // A bad key or account file: the client must be shut down before it is dropped.
            try? await client.shutdown()
            throw error
        }
        let hubSenders = HubSenders(
            defaults: senders, inbox: inbox, client: client, timeout: config.pushTimeout,
            recordOnly: config.provider == .inbox)
        try await hubSenders.load(from: credentialStore, logger: context.logger)
        let recorded = Platform.delivered.filter { !real.contains($0) }.map(\.name)
        context.logger.notice(
            "push providers",
            metadata: [
                "herald.sent": "\(real.map(\.name).joined(separator: ","))",
                "herald.recorded_in_inbox": "\(recorded.joined(separator: ","))",
            ])
        let worker = DeliveryWorker(
            outbox: outbox, senders: hubSenders,
            registrations: RegistrationServiceClient(context.client(.registration)),
            policy: config.retryPolicy,
            batchSize: config.batchSize, workers: config.workers, pushTimeout: config.pushTimeout,
            logger: context.logger)
        let dispatcher = Dispatcher(
            outbox: outbox, registrations: RegistrationServiceClient(context.client(.registration)),
            retryWindow: config.retryWindow,
            audienceMemoryRows: config.audienceMemoryRows, maxScheduledPerHub: config.maxScheduledPerHub,
            onEnqueue: { worker.wake() })
        var table = MethodTable()
        DispatchHandlers(
            dispatcher: dispatcher, outbox: outbox, inbox: inbox, hubSenders: hubSenders, credentials: credentialStore,
            testMode: context.config.testMode
        ).register(into: &table)
        let purge = Periodic("outcome and inbox purge", every: .seconds(3600), logger: context.logger) {
            let before = unixMillis() - config.retention.wholeMilliseconds
            let sends = try await outbox.purge(before: before)
            let recorded = try await inbox.purge(before: before)
            try await outbox.purgeUsage(before: before)
            if sends + recorded > 0 {
                context.logger.info(
                    "purged old sends", metadata: ["herald.sends": "\(sends)", "herald.inbox": "\(recorded)"])
            }
        }
        // Scheduled sends: due ones are made within a quarter second of their time, and at once
        // after a restart that spanned it (the first tick runs at start).
        let scheduler = Periodic("scheduled sends", every: .milliseconds(250), logger: context.logger) {
            try await dispatcher.fireDueScheduled(logger: context.logger)
        }
        var background: [any Service] =
            database.services + [PushClientShutdown(client: client), worker, purge, scheduler]
        if outbox.sharedByReplicas {
            background += [
                // A send committed by any replica wakes this one's worker at once (LISTEN/NOTIFY),
                // rather than at its next poll; listening again a second after the connection fails.
                Periodic("listening for sends", every: .seconds(1), logger: context.logger) {
                    try await outbox.listenForSends { worker.wake() }
                },
                // Credentials set through another replica reach this one within the interval.
                Periodic("hub credentials refresh", every: config.credentialsRefresh, logger: context.logger) {
                    try await hubSenders.load(from: credentialStore, logger: context.logger)
                },
            ]
        }
        if let box {
            background.append(box.keeper(logger: context.logger) { try await credentialStore.rewrapAll() })
        }
        return RPCServiceParts(table: table, background: background, healthChecks: [database.healthCheck])
    }
}
