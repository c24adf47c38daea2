import HeraldModel
import HeraldProto
import HeraldTestSupport
import Testing

/// Settings from the command line and the environment (every executable reads its own with it),
/// and the services' names and start order.
@Suite("settings", .watchedForStalls)
struct SettingsTests {
    // Precedence (command line, environment, default) is HeraldServiceTests.ConfigReaderTests'.
    @Test("forms: only the first = splits, a value may start with one dash, a flag before another is true")
    func forms() throws {
        let reader = try ConfigReader(arguments: ["--data-dir=/srv/h=x", "--test-mode", "--x", "-1", "--last"])
        #expect(reader.string("data-dir") == "/srv/h=x")
        #expect(try reader.bool("test-mode") && reader.bool("last"))
        #expect(reader.string("x") == "-1")
        #expect(ConfigReader.environmentName("push-timeout-ms") == "HERALD_PUSH_TIMEOUT_MS")
    }

    @Test("what is not --key value is refused with the reason, before anything starts")
    func refusedArguments() {
        for arguments in [["serve"], ["--"], ["-v"], ["--a", "b", "c"]] {
            #expect(throws: ConfigError.self, "\(arguments)") { try ConfigReader(arguments: arguments) }
        }
    }

    @Test("numbers, switches and choices: a value of the wrong kind names the key and the value")
    func typedValues() throws {
        let reader = try ConfigReader(
            arguments: [
                "--n", "12x", "--big", "99999999999999999999", "--b", "maybe", "--mode", "TUTORIAL", "--p", "x",
            ])
        for key in ["n", "big"] {
            let error = #expect(throws: ConfigError.self) { try reader.int(key, default: 0) }
            #expect(error?.description.contains(key) == true)
        }
        let error = #expect(throws: ConfigError.self) { try reader.bool("b") }
        #expect(error?.description == #"b must be true or false, not "maybe""#)
        #expect(try reader.choice("mode", default: AuthMode.accounts) == .tutorial)
        let choice = #expect(throws: ConfigError.self) { try reader.choice("p", default: EdgeProfile.secure) }
        #expect(choice?.description == #"p must be one of secure|rich, not "x""#)
        for (text, value) in [("1", true), ("yes", true), ("ON", true), ("0", false), ("no", false), ("off", false)] {
            #expect(try ConfigReader(arguments: ["--s", text]).bool("s") == value, "\(text)")
        }
        #expect(try ConfigReader(arguments: []).bool("s", default: true))
    }

    @Test("an unknown command-line key stops start-up, named; the environment may hold anything")
    func unknownKeys() throws {
        let reader = try ConfigReader(
            arguments: ["--data-dir", "d", "--dta-dir", "e", "--tset-mode"], environment: ["HERALD_NOT_A_KEY": "1"])
        let error = #expect(throws: ConfigError.self) {
            try reader.rejectUnknownArguments(known: ["data-dir", "test-mode"])
        }
        #expect(error?.description == "unknown settings --dta-dir, --tset-mode (--help lists the settings)")
        #expect(throws: Never.self) { try reader.rejectUnknownArguments(known: ["data-dir", "dta-dir", "tset-mode"]) }
    }

    @Test("services start after the services they call, and only the edge serves no RPC")
    func topology() {
        let order = ServiceName.allCases
        for service in order {
            let at = order.firstIndex(of: service)!
            for peer in service.peers { #expect(order.firstIndex(of: peer)! < at, "\(service) calls \(peer)") }
        }
        #expect(ServiceName.rpcServices == [.auth, .registration, .payload, .dispatch])
        #expect(Set(ServiceName.edge.peers) == Set(ServiceName.rpcServices))
    }
}

/// A browser's PushSubscription, the handle of a `browser` registration: what a device hands in,
/// checked before it is stored and before dispatch posts to it.
@Suite("Web Push subscriptions", .watchedForStalls)
struct WebPushSubscriptionTests {
    static let p256dh = Base64URL.encode([4] + [UInt8](repeating: 7, count: 64))
    static let auth = Base64URL.encode([UInt8](repeating: 1, count: 16))

    static func handle(endpoint: String = "https://push.example/e/1", p256dh: String = p256dh, auth: String = auth)
        -> String
    {
        #"{"endpoint":"\#(endpoint)","keys":{"p256dh":"\#(p256dh)","auth":"\#(auth)"},"expirationTime":null}"#
    }

    @Test("subscription.toJSON() as browsers write it: endpoint, the 65-byte point and the 16-byte secret")
    func valid() throws {
        let subscription = try WebPushSubscription(handle: Self.handle())
        #expect(subscription.endpoint.absoluteString == "https://push.example/e/1")
        #expect(subscription.p256dh.count == 65 && subscription.p256dh.first == 4)
        #expect(subscription.auth == [UInt8](repeating: 1, count: 16))
    }

    @Test(
        "refused: not JSON, an endpoint that is not https or holds control bytes, keys of the wrong size or form",
        arguments: [
            "", "[]", #"{"endpoint":"https://p/e"}"#, handle(endpoint: "http://push.example/e"),
            handle(endpoint: "https:///nohost"), handle(endpoint: "https://push.example/a b"),
            handle(endpoint: "https://push.example/a\\r\\nX-Injected: 1"), handle(endpoint: "file:///etc/passwd"),
            handle(endpoint: "https://push.example/" + String(repeating: "a", count: 2048)),
            handle(p256dh: Base64URL.encode([4] + [UInt8](repeating: 7, count: 63))),
            handle(p256dh: Base64URL.encode([2] + [UInt8](repeating: 7, count: 64))), handle(p256dh: "not base64!"),
            handle(auth: Base64URL.encode([UInt8](repeating: 1, count: 15))), handle(auth: ""),
            handle() + String(repeating: " ", count: 4096),
        ])
    func refused(_ handle: String) {
        #expect(throws: ServiceError.self) { try WebPushSubscription(handle: handle) }
    }

    @Test("URLs a device hands in: visible ASCII only")
    func visibleASCII() {
        #expect(URLRules.isVisibleASCII("https://x.example/a?b=c&d=%20"))
        for bad in ["https://x/a b", "https://x/\u{0}", "https://x/\u{7f}", "https://x/é", "https://x/\t"] {
            #expect(!URLRules.isVisibleASCII(bad), "\(bad.debugDescription)")
        }
    }
}
