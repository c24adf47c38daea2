import Foundation
import HeraldModel
import HeraldRPC
import HeraldTestSupport
import Testing

@testable import HeraldStack

/// `herald up`'s supervisor without its processes: the command line it starts each service with
/// (the one an in-process test stack builds its services from too), its restart backoff, and the
/// loopback ports it hands out.
@Suite("stack configuration", .watchedForStalls)
struct StackConfigurationTests {
    /// `--key value` pairs of a command line, the last value of a key winning.
    static func settings(_ arguments: [String]) -> [String: String] {
        var settings: [String: String] = [:]
        var index = 0
        while index < arguments.count {
            let key = String(arguments[index].dropFirst(2))
            if index + 1 < arguments.count, !arguments[index + 1].hasPrefix("--") {
                settings[key] = arguments[index + 1]
                index += 2
            } else {
                settings[key] = "true"
                index += 1
            }
        }
        return settings
    }

    @Test("every service: its folders, log level and transport; auth its mode; the edge its HTTP address and profile")
    func plain() {
        var configuration = StackConfiguration(directory: "/srv/h/./stack", binDirectory: "/bin")
        configuration.authMode = .tutorial
        configuration.profile = .rich
        configuration.httpPort = 0
        configuration.rpcTransport = .grpc
        #expect(configuration.directory == "/srv/h/stack" && configuration.runtimeDirectory == "/srv/h/stack/run")
        #expect(configuration.socketPath("auth") == "/srv/h/stack/run/auth.grpc.sock")
        #expect(configuration.leanSocketPath("auth") == "/srv/h/stack/run/auth.sock")
        for service in ServiceName.allCases.map(\.rawValue) {
            let settings = Self.settings(configuration.arguments(for: service))
            #expect(settings["runtime-dir"] == "/srv/h/stack/run" && settings["data-dir"] == "/srv/h/stack/data")
            #expect(settings["rpc-transport"] == "grpc" && settings["log-level"] == "info")
            #expect((settings["auth-mode"] == "tutorial") == (service == "auth"), "\(service)")
            #expect((settings["profile"] == "rich") == (service == "edge"), "\(service)")
            #expect(settings["database-url"] == nil && settings["tls-cert"] == nil)
        }
        let edge = Self.settings(configuration.arguments(for: "edge", httpPort: 41234))
        #expect(edge["http-host"] == "127.0.0.1" && edge["http-port"] == "41234")
    }

    @Test("PostgreSQL for the services that keep data there; extra settings last, so they win")
    func databaseAndExtras() {
        var configuration = StackConfiguration(directory: "/s", binDirectory: "/bin")
        configuration.databaseURL = "postgres://herald@db/herald"
        configuration.extraArguments = ["payload": ["--default-ttl-seconds", "5", "--log-level", "debug"]]
        for service in ServiceName.allCases.map(\.rawValue) {
            let settings = Self.settings(configuration.arguments(for: service))
            #expect(
                (settings["database-url"] != nil) == Stack.postgresServices.contains(service), "\(service)")
        }
        let payload = Self.settings(configuration.arguments(for: "payload"))
        #expect(payload["default-ttl-seconds"] == "5" && payload["log-level"] == "debug")
    }

    @Test(
        "TLS over TCP: each service listens on its ports and reaches each peer over TCP only, its socket pointed nowhere"
    )
    func tls() {
        var configuration = StackConfiguration(directory: "/s", binDirectory: "/bin")
        configuration.tls = StackTLS(certificate: "/c.pem", key: "/k.pem", ca: "/ca.pem")
        let ports = Dictionary(
            uniqueKeysWithValues: ServiceName.rpcServices.enumerated().map {
                ($1.rawValue, (lean: 21000 + $0 * 2, grpc: 21001 + $0 * 2))
            })
        for service in ServiceName.allCases {
            let settings = Self.settings(configuration.arguments(for: service.rawValue, tcpPorts: ports))
            #expect(settings["tls-cert"] == "/c.pem" && settings["tls-ca"] == "/ca.pem")
            #expect(settings["tls-require-client-cert"] == "true")
            if let own = ports[service.rawValue] {
                #expect(settings["listen-tcp"] == "127.0.0.1:\(own.lean)")
                #expect(settings["grpc-listen-tcp"] == "127.0.0.1:\(own.grpc)")
            }
            for peer in service.peers.map(\.rawValue) {
                #expect(settings["\(peer)-address"] == "127.0.0.1:\(ports[peer]!.lean)", "\(service) → \(peer)")
                #expect(settings["\(peer)-socket"] == "/s/run/none-\(peer).sock")
            }
        }
        configuration.peersByName = true
        configuration.rpcTransport = .grpc
        let edge = Self.settings(configuration.arguments(for: "edge", tcpPorts: ports))
        #expect(edge["auth-grpc-address"] == "dns:///localhost:\(ports["auth"]!.grpc)")
        #expect(edge["auth-grpc-socket"] == "/s/run/none-auth.sock" && edge["auth-address"] == nil)
    }

    // Moved from ProcessTests.OperationsTests: it starts no process.
    @Test("herald up's restart backoff grows with crashes in a row and starts again after a healthy run")
    func restartBackoffResets() {
        var crashes = 0
        for _ in 0..<12 { crashes = Stack.crashesInARow(previous: crashes, ranFor: .seconds(2)) }
        #expect(crashes == 12)
        #expect(Stack.restartDelay(afterCrashes: crashes) == .seconds(10))
        crashes = Stack.crashesInARow(previous: crashes, ranFor: Stack.healthyRun)
        #expect(crashes == 1)
        #expect(Stack.restartDelay(afterCrashes: crashes) == .milliseconds(100))
        #expect(Stack.restartDelay(afterCrashes: 2) == .milliseconds(200))
        #expect(Stack.crashesInARow(previous: 3, ranFor: nil) == 4)
    }

    @Test("loopback ports: below the ephemeral range and never handed out twice; a listener is seen listening")
    func ports() throws {
        let handed = try (0..<20).map { _ in try Stack.freePort() }
        #expect(Set(handed).count == handed.count)
        #expect(handed.allSatisfy { (20000..<32768).contains($0) })
        let listener = try LoopbackSocket(listening: true)
        defer { listener.close() }
        #expect(Stack.isListening(listener.port))
    }
}
