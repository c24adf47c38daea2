import Foundation
import PostgresNIO

/// The PostgreSQL side of ``Outbox``: the NOTIFY that wakes replicas (its schema is
/// ``DispatchSchema``).
extension Outbox {
    /// The NOTIFY channel of committed sends: the schema's, so deployments sharing a database do
    /// not wake each other.
    var sendsChannel: String { "\(postgres?.schema ?? "")_sends" }

    /// Calls `wake` whenever any replica commits a send, until the task is cancelled or the
    /// connection fails (it throws then; call it again). Holds one pooled connection for LISTEN.
    /// Without it, a replica that did not take the send finds its deliveries at its next poll.
    /// The notice names the send's hub and platforms, which join the hubs the claims know of
    /// (``HubDiscovery``), as a send made here does.
    public func listenForSends(_ wake: @escaping @Sendable () -> Void) async throws {
        guard let postgres else { return }
        let channel = sendsChannel
        try await postgres.client.withConnection { connection in
            try await connection.listen(on: channel) { notifications in
                for try await notification in notifications {
                    if let (hub, platforms) = HubDiscovery.parse(notice: notification.payload) {
                        self.noteSend(hub: hub, platforms: platforms)
                    } else {
                        // An older replica's notice names no hub: look for every hub again.
                        self.discovered.withLock { $0 = [:] }
                    }
                    wake()
                }
            }
        }
    }
}
