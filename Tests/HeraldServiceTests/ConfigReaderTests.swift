import HeraldModel
import HeraldRPC
import HeraldService
import HeraldTestSupport
import Testing

@Suite("configuration", .watchedForStalls)
struct ConfigReaderTests {
    @Test("arguments win over the environment, which wins over defaults")
    func precedence() throws {
        let reader = try ConfigReader(
            arguments: ["--http-port", "9000", "--profile=rich", "--check-health"],
            environment: ["HERALD_HTTP_PORT": "7000", "HERALD_LOG_LEVEL": "debug"])
        #expect(try reader.int("http-port", default: 1) == 9000)
        #expect(reader.string("profile") == "rich")
        #expect(try reader.bool("check-health"))
        #expect(reader.string("log-level", default: "info") == "debug")
        #expect(reader.string("data-dir", default: "x") == "x")
    }

    @Test("mistakes are reported, not defaulted")
    func mistakes() throws {
        let reader = try ConfigReader(arguments: ["--http-port", "eighty", "--sokcet", "/x"])
        #expect(throws: ConfigError.self) { try reader.int("http-port", default: 1) }
        #expect(throws: ConfigError.self) { try reader.rejectUnknownArguments(known: ["http-port", "socket"]) }
        #expect(throws: ConfigError.self) { try ConfigReader(arguments: ["positional"]) }
    }

    @Test("service defaults derive from the runtime and data folders")
    func runtimeDefaults() throws {
        let reader = try ConfigReader(arguments: [
            "--runtime-dir", "/r", "--data-dir", "/d", "--registration-socket", "/x.sock",
        ])
        let config = try RuntimeConfig(service: "dispatch", peers: ["registration", "payload"], reader: reader)
        #expect(config.leanSocketPath == "/r/dispatch.sock")
        #expect(config.grpcSocketPath == "/r/dispatch.grpc.sock")
        #expect(config.databasePath == "/d/dispatch.sqlite")
        #expect(config.socketPath(of: "registration") == "/x.sock")
        #expect(config.socketPath(of: "payload") == "/r/payload.sock")

        let grpc = try RuntimeConfig(
            service: "dispatch", peers: ["payload"],
            reader: try ConfigReader(arguments: ["--rpc-transport", "grpc", "--socket", "off"]))
        #expect(grpc.leanSocketPath == nil)
        #expect(grpc.socketPath(of: "payload") == ".herald/run/payload.grpc.sock")
        #expect(throws: ConfigError.self) {
            try RuntimeConfig(
                service: "x", peers: [],
                reader: try ConfigReader(arguments: ["--socket", "/" + String(repeating: "s", count: 120)]))
        }
    }

    @Test("the keys of secrets at rest: a folder or a command, never both")
    func encryptionKeySources() throws {
        func config(_ arguments: [String]) throws -> RuntimeConfig {
            try RuntimeConfig(service: "payload", peers: [], reader: try ConfigReader(arguments: arguments))
        }
        #expect(try config([]).encryptionKeys == nil && (try config([])).encryptionKeyCommand == nil)
        #expect(try config(["--encryption-keys", "/k"]).encryptionKeys == "/k")
        #expect(try config(["--encryption-key-command", "cat /k"]).encryptionKeyCommand == "cat /k")
        #expect(throws: ConfigError.self) {
            try config(["--encryption-keys", "/k", "--encryption-key-command", "cat /k"])
        }
    }

    @Test("a comma-separated socket or address setting names a peer's replicas")
    func peerReplicas() throws {
        func config(_ arguments: [String]) throws -> RuntimeConfig {
            try RuntimeConfig(service: "edge", peers: ["registration"], reader: try ConfigReader(arguments: arguments))
        }
        #expect(
            try config(["--registration-socket", "/a.sock, /b.sock"]).endpoints(of: "registration") == [
                .unix("/a.sock"), .unix("/b.sock"),
            ])
        #expect(try config([]).endpoints(of: "registration") == [.unix(".herald/run/registration.sock")])
        let tcp = try config(["--registration-address", "10.0.0.1:7001,reg-2.internal:7001"])
        #expect(
            tcp.endpoints(of: "registration") == [
                .tcp(host: "10.0.0.1", port: 7001), .tcp(host: "reg-2.internal", port: 7001),
            ])
        #expect(throws: ConfigError.self) { try config(["--registration-socket", "/a.sock,,/b.sock"]) }
        #expect(throws: ConfigError.self) { try config(["--registration-address", "10.0.0.1:7001,nope"]) }
    }
}
