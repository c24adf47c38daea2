import Foundation
import HeraldClient
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// Hostile findings against the NH routes, replayed from outside the way an attacker holding the Listen key (it is in
/// every shipped app) or no key at all would: each one failed before its fix.
@Suite("NH API against a hostile client", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct NHHostileTests {

    @Test("a Listen-signed token with se = Int64.max is refused, and herald-auth stays up")
    func expiryOverflow() async throws {
        try await LiveStack.with { live in
            let keys = try await NHFixture.hub("probe", live)
            let root = NHFixture.root(live)
            let (name, key) = NHFixture.secret(keys.listen)
            for expiry in ["9223372036854775807", "-9223372036854775808", "99999999999999999999"] {
                let signature = SASTokens.encode(SASTokens.signature(root, expiry, key: key), lower: false)
                let token = "SharedAccessSignature sr=\(root)&sig=\(signature)&se=\(expiry)&skn=\(name)"
                let reply = try await live.edge.request("GET", "/probe/installations/x", authorization: token)
                #expect(reply.status == 401, "se=\(expiry): \(reply.status) \(reply.text)")
            }
            #expect(await live.stopped().isEmpty, "herald-auth fell over")
        }
    }

    /// Hub "probe", made, and a token naming its Full key signed with a wrong secret.
    static func forgedFullToken(_ live: LiveStack) async throws -> (keys: (full: String, listen: String), token: String)
    {
        let keys = try await NHFixture.hub("probe", live)
        let (name, _) = NHFixture.secret(keys.full)
        let token = SASTokens.token(
            sr: NHFixture.root(live), keyName: name, key: "guess", expiry: Int64(Date().timeIntervalSince1970) + 600)
        return (keys, token)
    }

    @Test("forged tokens naming the Full key do not lock out its correctly signed tokens from the same address")
    func forgedTokensDoNotLockOut() async throws {
        try await LiveStack.with { live in
            let (keys, forged) = try await Self.forgedFullToken(live)
            var statuses: [Int] = []
            for _ in 0..<30 {
                statuses.append(
                    try await live.edge.request("GET", "/probe/installations/x", authorization: forged).status)
            }
            #expect(Set(statuses).isSubset(of: [401, 429]) && statuses.contains(429), "\(statuses)")
            let good = try await live.edge.request(
                "GET", "/probe/installations/x", authorization: NHFixture.token(sr: NHFixture.root(live), keys.full))
            #expect(good.status == 404, "a valid token after forged ones: \(good.status) \(good.text)")
        }
    }

    @Test(
        "behind a proxy that appends X-Forwarded-For, forged tokens each with a Forwarded of their own share one throttle",
        arguments: [false, true])
    func forgedForwardedHeader(proxyWritesForwarded: Bool) async throws {
        // The edge trusts the proxy at 127.0.0.1; the proxy writes one header (X-Forwarded-For by
        // default), naming the client 203.0.113.5. The client adds the other header itself, with a
        // new address each time: were it read, each forged token would come from an address of its
        // own and never meet the per-address throttle.
        try await LiveStack.with(configure: {
            $0.extraArguments["edge", default: []] += ["--trusted-proxies", "127.0.0.1/32"]
            if proxyWritesForwarded {
                $0.extraArguments["edge", default: []] += ["--trusted-proxy-header", "Forwarded"]
            }
        }) { live in
            let (keys, forged) = try await Self.forgedFullToken(live)
            var statuses: [Int] = []
            for index in 0..<30 {
                let headers =
                    proxyWritesForwarded
                    ? [("X-Forwarded-For", "198.51.100.\(index)"), ("Forwarded", "for=203.0.113.5")]
                    : [("Forwarded", "for=198.51.100.\(index)"), ("X-Forwarded-For", "203.0.113.5")]
                statuses.append(
                    try await live.edge.request(
                        "GET", "/probe/installations/x", authorization: forged, headers: headers
                    ).status)
            }
            #expect(Set(statuses).isSubset(of: [401, 429]) && statuses.contains(429), "\(statuses)")
        }
    }

    @Test("an unknown hub, an unknown key and a wrong signature get the same 401")
    func noEnumeration() async throws {
        try await LiveStack.with { live in
            let keys = try await NHFixture.hub("probe", live)
            let root = NHFixture.root(live)
            let (name, key) = NHFixture.secret(keys.full)
            let expiry = Int64(Date().timeIntervalSince1970) + 600
            var details: Set<String> = []
            for (hub, keyName, secret) in [("probe", name, "wrong"), ("probe", "NoSuchKey", key), ("nohub", name, key)]
            {
                let token = SASTokens.token(sr: root, keyName: keyName, key: secret, expiry: expiry)
                let reply = try await live.edge.request("GET", "/\(hub)/installations/x", authorization: token)
                #expect(reply.status == 401, "\(hub)/\(keyName): \(reply.status)")
                // The detail without its TrackingId and time stamp.
                details.insert(String(reply.text.split(separator: "TrackingId").first ?? ""))
            }
            #expect(details.count == 1, "\(details)")
        }
    }

    @Test(
        "a hub deleted and made again under its name, in any case, sees nothing of the old one; its scheduled send is cancelled"
    )
    func hubMadeAgain() async throws {
        try await LiveStack.with { live in
            let herald = live.configuration.binDirectory + "/herald"
            let dir = ["--runtime-dir", live.configuration.runtimeDirectory]
            let root = NHFixture.root(live)
            let old = try await NHFixture.hub("tenant1", live)
            let oldAuth = NHFixture.token(sr: root, old.full)
            // The old tenant: a device, a send (its telemetry) and a send scheduled an hour ahead.
            let device =
                #"{"installationId":"dev-old","platform":"apns","pushChannel":"\#(apnsToken(901))","tags":["t"]}"#
            #expect(
                try await live.edge.request(
                    "PUT", "/tenant1/installations/dev-old", authorization: oldAuth, body: device
                ).status == 200)
            let sent = try await NHFixture.post(
                live, "/tenant1/messages", old.full, body: #"{"aps":{"alert":"old"}}"#,
                headers: [("ServiceBusNotification-Format", "apple")])
            #expect(sent.status == 201, "\(sent.text)")
            let sentID = try NHFixture.id(sent.header("Location"))
            let formatter = ISO8601DateFormatter()
            let scheduled = try await NHFixture.post(
                live, "/tenant1/schedulednotifications", old.full, body: #"{"aps":{"alert":"later"}}"#,
                headers: [
                    ("ServiceBusNotification-Format", "apple"),
                    ("ServiceBusNotification-ScheduleTime", formatter.string(from: Date().addingTimeInterval(3600))),
                ])
            #expect(scheduled.status == 201, "\(scheduled.text)")
            let scheduledID = try NHFixture.id(scheduled.header("Location"))

            // Names regardless of case: the path may spell it as it likes; a second hub may not.
            let mixed = NHFixture.token(sr: root, old.full)
            #expect(
                try await live.edge.request("GET", "/TENANT1/installations/dev-old", authorization: mixed).status == 200
            )
            #expect(try await runProgram(herald, ["hubs", "add", "Tenant1"] + dir).status != 0)

            #expect(try await NHFixture.finalOutcome(live, notification: sentID).state == .completed)
            let deleted = try await runProgram(herald, ["hubs", "delete", "TENANT1"] + dir)
            #expect(deleted.status == 0, "\(deleted.error)")
            #expect(
                deleted.output.contains("1 device(s) and 2 send(s), 1 of them scheduled and now cancelled"),
                "\(deleted.output)")
            #expect(
                try await live.edge.request("GET", "/tenant1/installations/dev-old", authorization: oldAuth).status
                    == 401)

            let again = try await NHFixture.hub("Tenant1", live)
            let newAuth = NHFixture.token(sr: root, again.full)
            #expect(again.full != old.full)
            for path in [
                "/tenant1/installations/dev-old", "/tenant1/messages/\(sentID)", "/tenant1/messages/\(scheduledID)",
            ] {
                let reply = try await live.edge.request("GET", path, authorization: newAuth)
                #expect(reply.status == 404, "\(path): \(reply.status) \(reply.text)")
            }
            let export = try await live.edge.request("GET", "/tenant1/installations", authorization: newAuth)
            #expect(export.status == 200 && !export.text.contains("dev-old"), "\(export.status) \(export.text)")
            // The old sends are gone, the scheduled one never to be made.
            for id in [sentID, scheduledID] {
                let gone = await #expect(throws: ServiceError.self) {
                    try await RPCClient.with(socketPath: live.configuration.socketPath("dispatch"), timeout: .testRPC) {
                        client in
                        try await DispatchServiceClient(client).getOutcome(
                            GetOutcomeRequest(notificationID: id, scope: .all))
                    }
                }
                #expect(gone?.code == .notFound)
            }
        }
    }

    @Test(
        "a hub deletion that stops after auth's step names the hub's id and the command; herald hubs delete --id finishes it"
    )
    func unfinishedHubDeletion() async throws {
        try await LiveStack.with { live in
            let herald = live.configuration.binDirectory + "/herald"
            let dir = ["--runtime-dir", live.configuration.runtimeDirectory]
            let keys = try await NHFixture.hub("Gone1", live)
            let device =
                #"{"installationId":"dev-gone","platform":"apns","pushChannel":"\#(apnsToken(911))","tags":["t"]}"#
            #expect(
                try await live.edge.request(
                    "PUT", "/gone1/installations/dev-gone",
                    authorization: NHFixture.token(sr: NHFixture.root(live), keys.full), body: device
                ).status == 200)
            let socket = { (service: String) in live.configuration.socketPath(service) }
            let (hub, failure) = try await RPCClient.with(socketPath: socket("auth"), timeout: .testRPC) { authRPC in
                try await RPCClient.with(socketPath: socket("registration"), timeout: .testRPC) { registrationRPC in
                    // Dispatch "restarting": its socket is not there.
                    try await RPCClient.with(
                        socketPath: live.configuration.runtimeDirectory + "/gone.sock", timeout: .seconds(2)
                    ) {
                        downRPC in
                        let auth = AuthServiceClient(authRPC)
                        let hub = try await auth.getHub(GetHubRequest(name: "gone1"))
                        let failure = await #expect(throws: ServiceError.self) {
                            try await HubAdministration.delete(
                                name: hub.name, id: hub.id, auth: auth,
                                registration: RegistrationServiceClient(registrationRPC),
                                dispatch: DispatchServiceClient(downRPC))
                        }
                        return (hub, failure)
                    }
                }
            }
            #expect(
                failure?.code == .unavailable || failure?.code == .deadlineExceeded, "\(String(describing: failure))")
            #expect(failure?.message.contains("finish with: herald hubs delete --id \(hub.id)") == true)
            // The hub is gone from auth (its name leads nowhere), its device is not, yet.
            #expect(try await runProgram(herald, ["hubs", "delete", "Gone1"] + dir).status != 0)
            let finished = try await runProgram(herald, ["hubs", "delete", "--id", hub.id] + dir)
            #expect(finished.status == 0, "\(finished.error)")
            #expect(finished.output.contains("hub id \(hub.id): credentials, 1 device(s)"), "\(finished.output)")
            let again = try await runProgram(herald, ["hubs", "delete", "--id", hub.id] + dir)
            #expect(again.output.contains("0 device(s) and 0 send(s)"), "a second run finds nothing: \(again.output)")
            #expect(try await runProgram(herald, ["hubs", "delete", "--id", "default"] + dir).status != 0)
            #expect(try await runProgram(herald, ["hubs", "delete"] + dir).status != 0)
        }
    }

    @Test(
        "templates, batches, tag expressions and scheduled sends written to break a hub: refused or contained, every service up"
    )
    func hostileSends() async throws {
        try await LiveStack.with(configure: { $0.extraArguments["dispatch"] = ["--max-scheduled-per-hub", "3"] }) {
            live in
            let keys = try await NHFixture.hub("probe", live)
            let root = NHFixture.root(live)
            let listen = NHFixture.token(sr: root, keys.listen)
            let full = NHFixture.token(sr: root, keys.full)
            func put(_ id: String, _ handle: String, templates: String) async throws -> EdgeClient.Reply {
                try await live.edge.request(
                    "PUT", "/probe/installations/\(id)", authorization: listen,
                    body:
                        #"{"installationId":"\#(id)","platform":"apns","pushChannel":"\#(handle)","templates":{\#(templates)}}"#
                )
            }
            let good = #""t":{"body":"{\"aps\":{\"alert\":\"$(msg)\"}}"}"#
            // 2. An expiry out of range, written as a value: refused when written (400), not at each send.
            let literal = try await put(
                "lit", apnsToken(801),
                templates: #""t":{"body":"{}","headers":{"apns-expiration":"-9223372036854775808"}}"#)
            #expect(
                literal.status == 400 && literal.text.contains("apns-expiration"), "\(literal.status) \(literal.text)")
            // Computed from the send: that installation is left out of the send, the others get it.
            #expect(
                try await put(
                    "bad", apnsToken(802), templates: #""t":{"body":"{}","headers":{"apns-expiration":"$(exp)"}}"#
                ).status == 200)
            #expect(try await put("good", apnsToken(803), templates: good).status == 200)
            let properties = #"{"msg":"still here","exp":"-9223372036854775808"}"#
            let now = try await NHFixture.post(
                live, "/probe/messages", keys.full, body: properties,
                headers: [("ServiceBusNotification-Format", "template")])
            #expect(now.status == 201, "\(now.text)")
            #expect(try await live.waitForInbox { $0.handle == apnsToken(803) }.count == 1)
            // The same as a scheduled send (it once crash-looped dispatch at every start).
            let soon = ISO8601DateFormatter().string(from: Date().addingTimeInterval(2))
            let later = try await NHFixture.post(
                live, "/probe/schedulednotifications", keys.full, body: properties,
                headers: [("ServiceBusNotification-Format", "template"), ("ServiceBusNotification-ScheduleTime", soon)])
            #expect(later.status == 201, "\(later.text)")
            #expect(
                try await live.waitForInbox(count: 2, timeout: .seconds(20)) { $0.handle == apnsToken(803) }.count == 2)
            #expect(try await live.inbox().allSatisfy { $0.handle != apnsToken(802) })

            // 3. PATCH is checked as PUT is; the installation stays readable.
            let patch = try await live.edge.request(
                "PATCH", "/probe/installations/good", authorization: listen,
                body: #"[{"op":"replace","path":"/templates/t/body","value":"{\"aps\":{\"alert\":\"$(msg\"}}"}]"#)
            #expect(patch.status == 400, "\(patch.status) \(patch.text)")
            #expect(try await live.edge.request("GET", "/probe/installations/good", authorization: full).status == 200)

            // 4. A $batch built to be slow to refuse is answered at once, and the edge stays responsive.
            let boundary = String(repeating: "-", count: 2500)
            let started = ContinuousClock.now
            let dashes = String(repeating: "-", count: 120_000)
            let batch = try await rawExchange(
                live.edge.base.absoluteString,
                "POST /probe/messages/$batch?direct HTTP/1.1\r\nHost: \(live.edge.base.host!):\(live.edge.base.port!)\r\n"
                    + "Authorization: \(full)\r\n"
                    + "Content-Type: multipart/mixed; boundary=\"\(boundary)\"\r\nServiceBusNotification-Format: apple\r\n"
                    + "Content-Length: \(dashes.utf8.count)\r\nConnection: close\r\n\r\n\(dashes)")
            #expect(batch.hasPrefix("HTTP/1.1 400") || batch.hasPrefix("HTTP/1.1 413"), "\(batch.prefix(300))")
            #expect(ContinuousClock.now - started < .seconds(5), "the batch took \(ContinuousClock.now - started)")
            #expect(try await live.edge.request("GET", "/healthz").status == 200)

            // 10, 11. Tag expressions: too long is 400; 39 or more ! are folded, never a SQLite error.
            let padded = "a" + String(repeating: " ", count: 70_000) + "|| b"
            // (Raw: the edge answers before reading the body, which AsyncHTTPClient cannot take.)
            let body = #"{"aps":{"alert":"x"}}"#
            let long = try await rawExchange(
                live.edge.base.absoluteString,
                "POST /probe/messages HTTP/1.1\r\nHost: \(live.edge.base.host!):\(live.edge.base.port!)\r\nAuthorization: \(full)\r\n"
                    + "Content-Type: application/json\r\nServiceBusNotification-Format: apple\r\nServiceBusNotification-Tags: \(padded)\r\n"
                    + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)")
            #expect(long.hasPrefix("HTTP/1.1 400"), "\(long.prefix(300))")
            let bangs = String(repeating: "!", count: 41) + "a"
            let query = try await live.edge.request(
                "GET",
                "/probe/installations?tag=\(bangs.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)",
                authorization: full)
            #expect([200, 400].contains(query.status), "\(query.status) \(query.text.prefix(200))")

            // 10. Scheduled sends waiting per hub are bounded (3 here; 1000 by default).
            var statuses: [Int] = []
            for _ in 0..<4 {
                let reply = try await NHFixture.post(
                    live, "/probe/schedulednotifications", keys.full, body: #"{"aps":{"alert":"x"}}"#,
                    headers: [
                        ("ServiceBusNotification-Format", "apple"),
                        (
                            "ServiceBusNotification-ScheduleTime",
                            ISO8601DateFormatter().string(from: Date().addingTimeInterval(3600))
                        ),
                    ])
                statuses.append(reply.status)
            }
            #expect(statuses == [201, 201, 201, 429], "\(statuses)")

            // No service restarted on the way.
            #expect(await live.stopped().isEmpty)
        }
    }

    @Test("a Herald user named sas does not read the outcome of NH sends")
    func userNamedSAS() async throws {
        try await LiveStack.with(auth: .accounts, users: ["sas"]) { live in
            let full = try await NHFixture.defaultHub(live)
            let send = try await NHFixture.post(
                live, "/default/messages", full, body: #"{"aps":{"alert":"x"}}"#,
                headers: [("ServiceBusNotification-Format", "apple")])
            #expect(send.status == 201, "\(send.text)")
            let id = try NHFixture.id(send.header("Location"))
            for path in ["/v1/notifications/\(id)/outcome", "/v1/notifications/\(id)/failures"] {
                let reply = try await live.edge.request("GET", path, as: "sas")
                #expect(reply.status == 404, "\(path): \(reply.status) \(reply.text)")
            }
        }
    }

}
