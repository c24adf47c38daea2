import Crypto
import Foundation
import HeraldProto
import HeraldTestSupport
import NIOCore
import StackTestSupport
import Testing

/// Tenant limits on the whole stack: a hub over its request rate is throttled while another is served,
/// a hub over its quota sends nothing, and a hub whose provider answers slowly does not hold up
/// another hub's deliveries.
@Suite("tenants: request rates, push quotas, a slow provider", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct TenantLimitTests {
    @Test(
        "a hub over its request rate gets 429 with Retry-After (NH's XML; JSON on Herald's routes) and another hub is served"
    )
    func requestRate() async throws {
        try await LiveStack.with { live in
            let busy = try await NHFixture.hub("busy", live).full
            let calm = try await NHFixture.hub("calm", live).full
            let limits = try await live.herald([
                "hubs", "limits", "busy", "--requests-per-second", "1", "--request-burst", "3",
            ])
            #expect(limits.status == 0 && limits.output.contains("requests per second 1, burst 3"), "\(limits)")
            let root = NHFixture.root(live)
            func get(_ hub: String, _ connection: String) async throws -> EdgeClient.Reply {
                try await live.edge.request(
                    "GET", "/\(hub)/installations/nobody?api-version=2020-06",
                    authorization: NHFixture.token(sr: root, connection))
            }
            // Forty requests at once (a busy CI machine answers a request in seconds, so one after
            // the other would never outrun a token a second): at most the burst of 3, and a token
            // for each second they took, are answered; the rest are 429. The other hub's requests,
            // made among them, are all answered.
            let replies = try await withThrowingTaskGroup(of: (String, EdgeClient.Reply).self) { group in
                for n in 0..<50 {
                    let hub = n % 5 == 4 ? "calm" : "busy"
                    group.addTask { (hub, try await get(hub, hub == "calm" ? calm : busy)) }
                }
                var all: [(String, EdgeClient.Reply)] = []
                for try await reply in group { all.append(reply) }
                return all
            }
            let statuses = replies.filter { $0.0 == "busy" }.map(\.1.status)
            #expect(replies.filter { $0.0 == "calm" }.allSatisfy { $0.1.status == 404 }, "the other hub is served")
            #expect(statuses.filter { $0 == 404 }.count >= 3, "the burst is answered: \(statuses)")
            #expect(statuses.allSatisfy { [404, 429].contains($0) }, "\(statuses)")
            let throttled = replies.first { $0.1.status == 429 }?.1
            let refused = try #require(throttled, "\(statuses)")
            #expect(Int(refused.header("Retry-After") ?? "") ?? 0 >= 1)
            #expect(refused.header("Content-Type")?.hasPrefix("application/xml") == true)
            #expect(
                refused.text.contains("<Code>429</Code>") && refused.text.contains("request rate"), "\(refused.text)")
            // A token that does not verify is not counted against the hub, and is refused as before.
            let forged = NHFixture.token(sr: root, busy.replacingOccurrences(of: NHFixture.secret(busy).key, with: "x"))
            let stranger = try await live.edge.request(
                "GET", "/busy/installations/nobody", authorization: forged)
            #expect(stranger.status == 401, "\(stranger.text)")

            // Herald's own routes share the hub default's rate: JSON, with Retry-After.
            let defaults = try await live.herald([
                "hubs", "limits", "default", "--requests-per-second", "1", "--request-burst", "2",
            ])
            #expect(defaults.status == 0, "\(defaults)")
            let registers = try await withThrowingTaskGroup(of: EdgeClient.Reply.self) { group in
                for _ in 0..<40 {
                    group.addTask {
                        try await live.edge.request("POST", "/api/register?handle=\(apnsToken(5))", as: "alice")
                    }
                }
                var all: [EdgeClient.Reply] = []
                for try await reply in group { all.append(reply) }
                return all
            }
            #expect(registers.allSatisfy { [200, 429].contains($0.status) }, "\(registers.map(\.status))")
            let json = registers.first { $0.status == 429 }
            let limited = try #require(json)
            #expect(Int(limited.header("Retry-After") ?? "") ?? 0 >= 1)
            #expect(try limited.json()["error"] as? String == "too_many_requests", "\(limited.text)")
            // NH's routes of another hub are not the default's.
            #expect(try await get("calm", calm).status == 404)
            // Raising the limit holds at the next request (the verdict cache's generation).
            #expect(
                try await live.herald(["hubs", "limits", "default", "--requests-per-second", "0"]).status == 0)
            #expect(
                try await live.edge.request("POST", "/api/register?handle=\(apnsToken(5))", as: "alice").status == 200)
        }
    }

    @Test(
        "a Bearer token is revoked while the hub default's request rate is spent: revocation is never refused for rate")
    func revokeWhileThrottled() async throws {
        try await LiveStack.with(auth: .accounts, users: ["alice"]) { live in
            let edge = live.edge
            let issued = try await edge.request("POST", "/v1/auth/token", as: "alice")
            let token = try #require(try issued.json()["access_token"] as? String, "\(issued.text)")
            let bearer = "Bearer \(token)"
            #expect(
                try await live.herald([
                    "hubs", "limits", "default", "--requests-per-second", "1", "--request-burst", "1",
                ]).status == 0)
            // Spend the rate: requests until one is refused (the burst is one; a token a second).
            var throttled = false
            for _ in 0..<20 where !throttled {
                let reply = try await edge.request(
                    "POST", "/api/register?handle=\(apnsToken(6))", authorization: bearer)
                throttled = reply.status == 429
            }
            #expect(throttled, "the hub default's rate was never spent")
            let revoked = try await edge.request("DELETE", "/v1/auth/token", authorization: bearer)
            #expect(revoked.status == 204, "\(revoked.status) \(revoked.text)")
            #expect(
                try await live.herald(["hubs", "limits", "default", "--requests-per-second", "0"]).status == 0)
            let after = try await edge.request("POST", "/api/register?handle=\(apnsToken(6))", authorization: bearer)
            #expect(after.status == 401, "the revoked token still works: \(after.status)")
        }
    }

    @Test("a hub over its push quota gets 403 QuotaExceeded and sends nothing; its other sends and other hubs go on")
    func quota() async throws {
        try await StackFixture.withProviders { fixture, live in
            let full = try await NHFixture.hub("metered", live).full
            let set = try await live.herald([
                "hubs", "credentials", "set", "metered", "apns", "key=@\(fixture.folder)/apns.p8",
                "key-id=\(ProviderFixture.keyID)", "team-id=\(ProviderFixture.teamID)",
                "topic=\(ProviderFixture.topic)", "url=\(fixture.double.url)",
            ])
            try #require(set.status == 0, "\(set.error)")
            let limits = try await live.herald(["hubs", "limits", "metered", "--pushes-per-month", "2"])
            #expect(limits.status == 0 && limits.output.contains("per month 2 (0 this month)"), "\(limits)")
            let auth = NHFixture.token(sr: NHFixture.root(live), full)
            for n in 0..<3 {
                let put = try await live.edge.request(
                    "PUT", "/metered/installations/d\(n)", authorization: auth,
                    body:
                        #"{"installationId":"d\#(n)","platform":"apns","pushChannel":"\#(apnsToken(300 + n))","tags":["all"]}"#
                )
                #expect(put.status == 200, "\(put.text)")
            }
            func send(_ tags: String) async throws -> EdgeClient.Reply {
                try await NHFixture.post(
                    live, "/metered/messages?api-version=2020-06", full, body: #"{"aps":{"alert":"hi"}}"#,
                    headers: [("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", tags)])
            }
            let over = try await send("all")
            #expect(over.status == 403, "\(over.text)")
            #expect(
                over.text.contains("QuotaExceeded") && over.header("Content-Type")?.hasPrefix("application/xml") == true
            )
            let one = try await send("$InstallationId:{d0}")
            #expect(one.status == 201, "\(one.text)")
            let outcome = try await NHFixture.finalOutcome(live, notification: try NHFixture.id(one.header("Location")))
            #expect(outcome.state == .completed && outcome.platforms.first?.success == 1, "\(outcome)")
            // Only that one push reached APNs: nothing of the refused send.
            let pushes = fixture.double.requests.filter { $0.path.hasPrefix("/3/device/") }
            #expect(pushes.map(\.path) == ["/3/device/\(apnsToken(300))"], "\(pushes.map(\.path))")
            let shown = try await live.herald(["hubs", "limits", "metered"])
            #expect(shown.output.contains("per month 2 (1 this month)"), "\(shown.output)")
            // A weight changes only the weight; the quota stays.
            let weighted = try await live.herald(["hubs", "limits", "metered", "--weight", "3"])
            #expect(
                weighted.output.contains("weight 3") && weighted.output.contains("per month 2 (1 this month)"),
                "\(weighted.output)")
            #expect(try await live.herald(["hubs", "limits", "metered", "--weight", "101"]).status != 0)

            // Herald's routes: the hub default's day quota, 403 in JSON.
            #expect(try await live.herald(["hubs", "limits", "default", "--pushes-per-day", "1"]).status == 0)
            try await live.register("alice", handle: apnsToken(401), tags: ["fans"])
            try await live.register("bob", handle: apnsToken(402), tags: ["fans"])
            let alert = try await live.edge.upload(
                "/v1/notifications?kind=alert&to_tag=fans", as: "alice", bytes: Data("Goal!".utf8),
                contentType: "text/plain")
            #expect(alert.status == 403 && alert.text.contains("QuotaExceeded"), "\(alert.text)")
            #expect(try alert.json()["error"] as? String == "forbidden")
            let own = try await live.edge.upload(
                "/v1/notifications?kind=alert&to_user=alice", as: "alice", bytes: Data("1".utf8),
                contentType: "text/plain")
            #expect(own.status == 202, "\(own.text)")
        }
    }

    @Test("a hub whose provider answers slowly does not hold up another hub's deliveries")
    func slowProvider() async throws {
        try await StackFixture.withProviders { fixture, live in
            // Hub "slow" has its own APNs key and topic, which the double answers after 20 s; hub
            // "quick" uses the fixture's, answered at once.
            let key = P256.Signing.PrivateKey()
            try key.pemRepresentation.write(toFile: "\(fixture.folder)/slow.p8", atomically: true, encoding: .utf8)
            fixture.extraAPNsKeys.withLock { $0["KEYSSSSSSS"] = (key.publicKey, "TEAMSSSSSS", "com.example.slow") }
            fixture.apnsTopicDelay.withLock { $0["com.example.slow"] = .seconds(20) }
            var connection: [String: String] = [:]
            for (hub, keyFile, kid, team, topic) in [
                ("slow", "slow.p8", "KEYSSSSSSS", "TEAMSSSSSS", "com.example.slow"),
                ("quick", "apns.p8", ProviderFixture.keyID, ProviderFixture.teamID, ProviderFixture.topic),
            ] {
                connection[hub] = try await NHFixture.hub(hub, live).full
                let set = try await live.herald([
                    "hubs", "credentials", "set", hub, "apns", "key=@\(fixture.folder)/\(keyFile)", "key-id=\(kid)",
                    "team-id=\(team)", "topic=\(topic)", "url=\(fixture.double.url)",
                ])
                try #require(set.status == 0, "\(set.error)")
            }
            let connections = connection
            @Sendable func install(_ hub: String, _ id: String, _ token: String) async throws {
                let put = try await live.edge.request(
                    "PUT", "/\(hub)/installations/\(id)",
                    authorization: NHFixture.token(sr: NHFixture.root(live), connections[hub]!),
                    body: #"{"installationId":"\#(id)","platform":"apns","pushChannel":"\#(token)","tags":["t"]}"#)
                #expect(put.status == 200, "\(put.text)")
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in 0..<20 { group.addTask { try await install("slow", "s\(n)", apnsToken(500 + n)) } }
                group.addTask { try await install("quick", "q0", apnsToken(600)) }
                try await group.waitForAll()
            }
            func send(_ hub: String) async throws -> String {
                let sent = try await NHFixture.post(
                    live, "/\(hub)/messages?api-version=2020-06", connections[hub]!,
                    body: #"{"aps":{"alert":"to \#(hub)"}}"#,
                    headers: [("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "t")])
                #expect(sent.status == 201, "\(sent.text)")
                return try NHFixture.id(sent.header("Location"))
            }
            let slowSend = try await send("slow")
            // The slow hub's pushes are at APNs, unanswered: its batch is in flight.
            let held = try await fixture.double.waitFor(20) { $0.header("apns-topic") == "com.example.slow" }
            #expect(held.count == 20)
            let quickSend = try await send("quick")
            let quick = try await fixture.double.waitFor(1, timeout: .seconds(15)) {
                $0.path == "/3/device/\(apnsToken(600))"
            }
            // Ordering, not timing: the quick hub's push went out while every one of the slow hub's
            // was still waiting for its answer (before this issue it waited for them: one batch in flight).
            let slowOutcome = try await NHFixture.outcome(live, notification: slowSend)
            #expect(quick.count == 1, "the quick hub's push did not go out while the slow hub's were in flight")
            #expect(slowOutcome.platforms.first?.success ?? 0 == 0, "\(slowOutcome)")
            let quickOutcome = try await NHFixture.finalOutcome(live, notification: quickSend)
            #expect(quickOutcome.state == .completed && quickOutcome.platforms.first?.success == 1, "\(quickOutcome)")
            var slowFinal = try await NHFixture.outcome(live, notification: slowSend)
            let deadline = ContinuousClock.now + .seconds(60)
            while slowFinal.state != .completed, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
                slowFinal = try await NHFixture.outcome(live, notification: slowSend)
            }
            #expect(slowFinal.state == .completed && slowFinal.platforms.first?.success == 20, "\(slowFinal)")
        }
    }
}
