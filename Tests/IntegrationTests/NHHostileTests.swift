import Foundation
import HeraldModel
import HeraldStack
import HeraldTestSupport
import Testing

/// Issue 32's findings, replayed from outside the way an attacker holding the Listen key (it is in
/// every shipped app) or no key at all would: each one failed before its fix.
@Suite("NH API against a hostile client", .serialized, .timeLimit(.minutes(3)))
struct NHHostileTests {
    /// Resident set size of a process in MB, from /proc.
    static func rss(_ pid: Int32) -> Double {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Double(line.split(separator: " ").dropFirst().first ?? "0").map { $0 / 1024 } ?? 0
    }

    @Test("a Listen-signed token with se = Int64.max is refused, and herald-auth stays up")
    func expiryOverflow() async throws {
        try await LiveStack.with { live in
            let keys = try await NotificationHubsTests.hub("probe", live)
            let root = NotificationHubsTests.root(live)
            let authPID = await live.stack.pid(of: "auth")
            let (name, key) = NotificationHubsTests.secret(keys.listen)
            for expiry in ["9223372036854775807", "-9223372036854775808", "99999999999999999999"] {
                let signature = SASTokens.encode(SASTokens.signature(root, expiry, key: key), lower: false)
                let token = "SharedAccessSignature sr=\(root)&sig=\(signature)&se=\(expiry)&skn=\(name)"
                let reply = try await live.edge.request("GET", "/probe/installations/x", authorization: token)
                #expect(reply.status == 401, "se=\(expiry): \(reply.status) \(reply.text)")
            }
            #expect(await live.stack.pid(of: "auth") == authPID)
            #expect(await live.stack.exitStatuses(of: "auth").isEmpty)
        }
    }

    @Test("forged tokens naming the Full key do not lock out its correctly signed tokens from the same address")
    func forgedTokensDoNotLockOut() async throws {
        try await LiveStack.with { live in
            let keys = try await NotificationHubsTests.hub("probe", live)
            let root = NotificationHubsTests.root(live)
            let (name, _) = NotificationHubsTests.secret(keys.full)
            let forged = SASTokens.token(sr: root, keyName: name, key: "guess", expiry: Int64(Date().timeIntervalSince1970) + 600)
            var statuses: [Int] = []
            for _ in 0..<30 { statuses.append(try await live.edge.request("GET", "/probe/installations/x", authorization: forged).status) }
            #expect(Set(statuses).isSubset(of: [401, 429]) && statuses.contains(429), "\(statuses)")
            let good = try await live.edge.request(
                "GET", "/probe/installations/x", authorization: NotificationHubsTests.token(sr: root, keys.full))
            #expect(good.status == 404, "a valid token after forged ones: \(good.status) \(good.text)")
        }
    }

    @Test("an unknown hub, an unknown key and a wrong signature get the same 401")
    func noEnumeration() async throws {
        try await LiveStack.with { live in
            let keys = try await NotificationHubsTests.hub("probe", live)
            let root = NotificationHubsTests.root(live)
            let (name, key) = NotificationHubsTests.secret(keys.full)
            let expiry = Int64(Date().timeIntervalSince1970) + 600
            var details: Set<String> = []
            for (hub, keyName, secret) in [("probe", name, "wrong"), ("probe", "NoSuchKey", key), ("nohub", name, key)] {
                let token = SASTokens.token(sr: root, keyName: keyName, key: secret, expiry: expiry)
                let reply = try await live.edge.request("GET", "/\(hub)/installations/x", authorization: token)
                #expect(reply.status == 401, "\(hub)/\(keyName): \(reply.status)")
                // The detail without its TrackingId and time stamp.
                details.insert(String(reply.text.split(separator: "TrackingId").first ?? ""))
            }
            #expect(details.count == 1, "\(details)")
        }
    }

    @Test("a Herald user named sas does not read the outcome of NH sends")
    func userNamedSAS() async throws {
        try await LiveStack.with(auth: .accounts, users: ["sas"]) { live in
            let full = try await NHSendTests.defaultHub(live)
            let send = try await NHSendTests.post(
                live, "/default/messages", full, body: #"{"aps":{"alert":"x"}}"#, headers: [("ServiceBusNotification-Format", "apple")])
            #expect(send.status == 201, "\(send.text)")
            let id = try NHSendTests.id(send.header("Location"))
            for path in ["/v1/notifications/\(id)/outcome", "/v1/notifications/\(id)/failures"] {
                let reply = try await live.edge.request("GET", path, as: "sas")
                #expect(reply.status == 404, "\(path): \(reply.status) \(reply.text)")
            }
        }
    }

    @Test("600 tokens with 60 KB key names do not grow herald-auth")
    func longKeyNamesDoNotGrowAuth() async throws {
        try await LiveStack.with { live in
            _ = try await NotificationHubsTests.hub("probe", live)
            let pid = try #require(await live.stack.pid(of: "auth"))
            let root = NotificationHubsTests.root(live)
            let expiry = Int64(Date().timeIntervalSince1970) + 600
            // Warm up the paths first, so the baseline includes what any traffic allocates once.
            for n in 0..<50 {
                let token = SASTokens.token(sr: root, keyName: "k\(n)", key: "x", expiry: expiry)
                _ = try await live.edge.request("GET", "/probe/installations/x", authorization: token)
            }
            let before = Self.rss(pid)
            // 600 (36 MB of key names, which the old ledger kept whole) in 8 streams: the issue's
            // 1,500 one by one outlasted the suite's time limit on CI's loaded machine.
            try await withThrowingTaskGroup(of: Int.self) { group in
                for stream in 0..<8 {
                    group.addTask {
                        var last = 0
                        for n in stride(from: stream, to: 600, by: 8) {
                            let name = String(repeating: "k", count: 60_000) + "\(n)"
                            let token = SASTokens.token(sr: root, keyName: name, key: "x", expiry: expiry)
                            last = try await live.edge.request("GET", "/probe/installations/x", authorization: token).status
                        }
                        return last
                    }
                }
                for try await status in group { #expect([401, 429].contains(status), "\(status)") }
            }
            let after = Self.rss(pid)
            print("herald-auth RSS: \(before) MB before, \(after) MB after 600 tokens with 60 KB key names")
            #expect(after - before < 10, "herald-auth grew from \(before) to \(after) MB")
        }
    }
}
