import Foundation
import HeraldModel
import HeraldRPC
import HeraldTestSupport
import Testing

@testable import Edge

/// herald-edge's settings: the defaults a tutorial stack starts with, and a clear refusal, before
/// anything listens, for a value the edge cannot honour.
@Suite("edge settings", .watchedForStalls)
struct EdgeConfigTests {
    static func config(_ arguments: [String]) throws -> EdgeConfig {
        try EdgeConfig(reader: ConfigReader(arguments: arguments))
    }

    @Test("defaults: loopback 8080, the secure profile, 64 KiB bodies, 5 MiB content, the built-in PNG, plain HTTP")
    func defaults() throws {
        let config = try Self.config([])
        #expect(config.host == "127.0.0.1" && config.port == 8080 && config.profile == .secure)
        #expect(config.maxBodyBytes == 65536 && config.maxContentBytes == 5 << 20)
        #expect(config.richImageType == "image/png" && config.richImage.starts(with: [0x89, 0x50, 0x4E, 0x47]))
        #expect(config.richMessage == "Check this image out!")
        #expect(config.headerTimeout == .seconds(30) && config.bodyTimeout == .seconds(60))
        #expect(config.drainIdleGrace == .seconds(1) && config.nhTestSendWait == .seconds(10))
        #expect(config.httpTLS == nil && !config.testMode && config.hubRateShare == 1)
    }

    @Test(
        "out of range or malformed: refused with the setting's name",
        arguments: [
            ["--http-port", "65536"], ["--http-port", "-1"], ["--http-port", "http"], ["--profile", "fancy"],
            ["--header-timeout-seconds", "0"], ["--body-timeout-seconds", "3601"], ["--drain-idle-grace-ms", "-1"],
            ["--drain-idle-grace-ms", "60001"], ["--nh-test-send-wait-ms", "120001"], ["--hub-rate-share", "0"],
            ["--hub-rate-share", "1001"], ["--max-body-bytes", "0"], ["--max-content-bytes", "-5"],
            ["--max-body-bytes", "\(RPCLimits.maxMessageBytes)"], ["--max-content-bytes", "\(Int64.max)"],
            ["--http-tls-cert", "/c.pem"], ["--http-tls-key", "/k.pem"], ["--trusted-proxies", "10.0.0.0/33"],
            ["--rich-image", "/no/such/image.png"], ["--test-mode", "sometimes"],
        ])
    func refused(_ arguments: [String]) {
        let error = #expect(throws: ConfigError.self) { try Self.config(arguments) }
        let key = arguments[0].dropFirst(2)
        #expect(
            error?.description.contains(key) == true || error?.description.contains("trusted") == true,
            "\(arguments): \(error?.description ?? "taken")")
    }

    @Test("the largest bodies an RPC message holds are taken; HTTPS needs its certificate and its key")
    func limits() throws {
        let largest = RPCLimits.maxMessageBytes - 4096
        let config = try Self.config(["--max-body-bytes", "\(largest)", "--max-content-bytes", "\(largest)"])
        #expect(config.maxBodyBytes == largest && config.maxContentBytes == largest)
        let https = try Self.config(["--http-tls-cert", "/c.pem", "--http-tls-key", "/k.pem", "--http-port", "0"])
        #expect(https.httpTLS?.certificate == "/c.pem" && https.httpTLS?.key == "/k.pem" && https.port == 0)
    }

    @Test(
        "rich-image: its type from its extension, in any case; an unknown extension or a file over the content limit refused"
    )
    func richImage() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("edge-config-\(UUID())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        func file(_ name: String, bytes: Int = 10) throws -> String {
            let path = dir.appendingPathComponent(name).path
            try Data(repeating: 7, count: bytes).write(to: URL(fileURLWithPath: path))
            return path
        }
        for (name, type) in [
            ("a.PNG", "image/png"), ("b.jpg", "image/jpeg"), ("c.jpeg", "image/jpeg"), ("d.gif", "image/gif"),
            ("e.webp", "image/webp"),
        ] {
            let config = try Self.config(["--rich-image", try file(name)])
            #expect(config.richImageType == type && config.richImage.count == 10, "\(name)")
        }
        for name in ["f.svg", "g", "h.png.exe"] {
            #expect(throws: ConfigError.self, "\(name)") { try Self.config(["--rich-image", try file(name)]) }
        }
        #expect(throws: ConfigError.self) {
            try Self.config(["--rich-image", try file("big.png", bytes: 2048), "--max-content-bytes", "1024"])
        }
    }
}
