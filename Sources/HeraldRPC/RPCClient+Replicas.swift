import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import HeraldLeanTransport
import HeraldModel
import HeraldProto
import HeraldTelemetry
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization
import Tracing

extension RPCClient {
    /// Looks the replicas up now and every `discovery.refresh` until cancelled. A failed look-up
    /// keeps the replicas known (a DNS hiccup is not every pod gone).
    func lookUp(_ discovery: RPCDiscovery) async {
        while !Task.isCancelled {
            if let found = await discovery.resolve(discovery.name, discovery.port) {
                update(to: found, serverName: discovery.name)
            }
            do { try await Task.sleep(for: discovery.refresh) } catch { return }
        }
    }

    /// Makes `found` the replicas: keeps those still there, connects the new ones, closes those gone.
    func update(to found: [RPCEndpoint], serverName: String) {
        let known = Set(replicas.map(\.endpoint))
        // Made outside the lock: a TLS context reads its files.
        let new = found.filter { !known.contains($0) }.compactMap { endpoint in
            (try? Self.backend(
                endpoint: endpoint, transport: transport, tls: tls, serverName: serverName,
                eventLoopGroup: eventLoopGroup))
                .map { Replica(endpoint: endpoint, backend: $0) }
        }
        let wanted = Set(found)
        let (added, removed) = members.withLock { members -> ([Replica], [Replica]) in
            guard !members.closed else { return ([], new) }
            let removed = members.replicas.filter { !wanted.contains($0.endpoint) }
            let added = new.filter { replica in !members.replicas.contains { $0.endpoint == replica.endpoint } }
            members.replicas = members.replicas.filter { wanted.contains($0.endpoint) } + added
            return (added, removed + new.filter { replica in !added.contains { $0 === replica } })
        }
        for replica in added { if case .grpc(let grpc) = replica.backend { toRun.continuation.yield(grpc) } }
        for replica in removed { Self.close(replica.backend) }
    }

    /// Asks each replica's grpc.health.v1 every ``healthInterval`` until the client closes or the
    /// task is cancelled; SERVING marks it healthy, any other answer or failure not, and so do two
    /// checks in a row unanswered within a second (one late answer on a loaded machine is not a
    /// replica down: marking it so sent calls to the replicas that were).
    func checkReplicas() async {
        while !Task.isCancelled {
            await withTaskGroup(of: Void.self) { group in
                for replica in replicas {
                    group.addTask {
                        // A reachable replica is checked failing fast: if it is gone it says so
                        // at once, and only one connected but slow runs into the deadline. One
                        // already unreachable is checked waiting for its connection (gRPC
                        // reconnects for a waiting call), so it is seen again the moment it is
                        // back; until then its timeouts keep it unreachable.
                        let reachable = replica.reachable.load(ordering: .relaxed)
                        do {
                            let answer: HealthCheckResponse = try await self.call(
                                HealthMethods.check, try self.encode(HealthCheckRequest(service: "")), requestID: nil,
                                trace: nil,
                                timeout: .seconds(1), failFast: reachable, on: replica.backend)
                            replica.checked(serving: answer.status == .serving)
                        } catch let error as ServiceError where error.code == .deadlineExceeded {
                            if reachable { replica.unanswered() }
                        } catch is LeanClient.NotSent {
                            replica.unreachable()
                        } catch let error as ServiceError where error.code == .unavailable {
                            replica.unreachable()
                        } catch {
                            replica.checked(serving: false)
                        }
                    }
                }
            }
            try? await Task.sleep(for: healthInterval)
        }
    }

    /// Whether each replica answered its last health check (tests, metrics), in the order they came.
    public var replicaHealth: [(endpoint: RPCEndpoint, healthy: Bool)] {
        replicas.map { ($0.endpoint, $0.healthy.load(ordering: .relaxed)) }
    }
}
