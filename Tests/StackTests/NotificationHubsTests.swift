import Crypto
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldStack
import HeraldTestSupport
import NotificationHubs
import ProviderDoubles
import StackTestSupport
import Testing

/// Herald's Notification Hubs API driven the way NH's clients drive it: PyPI's
/// azure-notification-hub-unofficial, and raw HTTP with each SDK's SAS spelling.
@Suite("Notification Hubs API", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct NotificationHubsTests {

    @Test(
        "azure-notification-hub-unofficial creates, patches, reads and deletes installations; Listen cannot send or query"
    )
    func unofficialPythonClient() async throws {
        let python = try #require(which("python3"), "python3 is required (scripts/test.sh installs it)")
        try await LiveStack.with { live in
            let keys = try await NHFixture.hub("pyhub", live)
            let http = { (s: String) in s.replacingOccurrences(of: "Endpoint=sb://", with: "Endpoint=http://") }
            let result = try await runProgram(
                python,
                [
                    packageRoot.appendingPathComponent("Tests/python/nh_installations_check.py").path, "pyhub",
                    http(keys.full),
                    http(keys.listen),
                ])
            try #require(result.status == 0, "nh_installations_check.py failed: \(result.error)")
            let out = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any])
            let got = try #require(out["get"] as? [String: Any])
            #expect(got["installationId"] as? String == "py-dev-1")
            #expect(got["platform"] as? String == "apns")
            #expect(got["userId"] as? String == "alice@example.com")
            #expect(got["tags"] as? [String] == ["news", "sports"])
            #expect(got["pushChannelExpired"] as? Bool == false)
            #expect(got["expirationTime"] as? String == "9999-12-31T23:59:59.9999999Z")
            let templates = try #require(got["templates"] as? [String: [String: Any]])
            #expect(templates["greeting"]?["tags"] as? [String] == ["en", "greeting"])
            let patched = try #require(out["after_patch"] as? [String: Any])
            #expect(patched["tags"] as? [String] == ["news", "weather"])
            #expect(patched["userId"] as? String == "bob@example.com")
            #expect((patched["templates"] as? [String: Any])?["farewell"] != nil)
            #expect(out["get_missing"] as? Int == 404)
            #expect(out["get_deleted"] as? Int == 404)
            #expect(out["put_gcm"] as? Int == 400)
            #expect(out["put_bad_tag"] as? Int == 400)
            // NH's 401 for a missing claim (the JS SDK, which this client ports, branches on it).
            #expect(out["listen_send"] as? Int == 401, "\(out)")
            #expect(out["listen_query"] as? Int == 401)
            #expect(out["backend_query"] as? [String] == ["py-0", "py-1", "py-2"])
            // The back end's send reached the two matching installations ("all && !n1").
            let entries = try await live.waitForInbox(count: 2) { _ in true }
            #expect(
                Set(entries.map(\.handle)) == [String(repeating: "00", count: 32), String(repeating: "02", count: 32)])
        }
    }

    @Test(
        "raw HTTP: the .NET, Java and Go SAS spellings; NH's status codes and XML errors; hub A's key cannot touch hub B"
    )
    func rawHTTP() async throws {
        try await LiveStack.with { live in
            let a = try await NHFixture.hub("huba", live)
            let b = try await NHFixture.hub("hubb", live)
            let host = "\(live.edge.base.host!):\(live.edge.base.port!)"
            let path = "/huba/installations/raw-1"
            let body = #"{"installationId":"raw-1","platform":"fcmV1","pushChannel":"fcm-token-1","tags":["x"]}"#
            func call(
                _ method: String, _ target: String = path, _ authorization: String?, body: String? = nil,
                type: String = "application/json"
            ) async throws -> EdgeClient.Reply {
                try await live.edge.request(
                    method, target, authorization: authorization, bytes: body.map { Data($0.utf8) }, contentType: type)
            }
            // Each SDK's sr (docs/notification-hubs.md, "SAS tokens"), one PUT each.
            let dotnet = NHFixture.token(
                sr: NHFixture.encode("http://\(host)\(path)/".lowercased(), lower: true), a.full)
            let java = NHFixture.token(
                sr: NHFixture.encode("http://\(host)\(path)?api-version=2020-06", lower: true).lowercased(), a.full)
            let go = NHFixture.token(sr: NHFixture.encode("https://\(host)", lower: false), a.full)
            for (client, token) in [(".NET", dotnet), ("Java", java), ("Go", go)] {
                let put = try await call("PUT", path + "?api-version=2020-06", token, body: body)
                #expect(put.status == 200, "\(client): \(put.text)")
                #expect(put.header("Content-Location") == "http://\(host)\(path)", "\(client)")
            }
            let root = NHFixture.encode("http://\(host)/", lower: false)
            let full = NHFixture.token(sr: root, a.full)
            let listen = NHFixture.token(sr: root, a.listen)
            let get = try await call("GET", path, listen)
            #expect(get.status == 200 && get.text.contains(#""platform":"fcmv1""#), "\(get.text)")
            // PATCH: both content types; 200 as every SDK checks.
            for type in ["application/json-patch+json", "application/json"] {
                let patch = try await call(
                    "PATCH", path, listen, body: #"[{"op":"add","path":"/tags","value":"y"}]"#, type: type)
                #expect(patch.status == 200, "\(type): \(patch.text)")
            }
            #expect(try await call("DELETE", "/huba/installations/never-was", listen).status == 204)

            // Errors: NH's XML body with the tracking id.
            func expectXML(
                _ reply: EdgeClient.Reply, _ status: Int, _ words: String,
                sourceLocation: SourceLocation = #_sourceLocation
            ) {
                #expect(reply.status == status, "\(reply.text)", sourceLocation: sourceLocation)
                #expect(
                    reply.header("Content-Type")?.hasPrefix("application/xml") == true, sourceLocation: sourceLocation)
                #expect(
                    reply.text.hasPrefix("<Error><Code>\(status)</Code><Detail>"), "\(reply.text)",
                    sourceLocation: sourceLocation)
                #expect(reply.text.contains(words), "\(reply.text)", sourceLocation: sourceLocation)
                #expect(reply.text.contains("TrackingId:"), sourceLocation: sourceLocation)
            }
            expectXML(try await call("GET", "/huba/installations/nope", listen), 404, "Installation not found")
            expectXML(try await call("GET", path, nil), 401, "MissingToken")
            expectXML(
                try await call("GET", path, NHFixture.token(sr: root, a.full, expiry: 1_000_000)), 401, "ExpiredToken")
            expectXML(
                try await call(
                    "GET", path, NHFixture.token(sr: NHFixture.encode("http://\(host)/hubb", lower: false), a.full)),
                401, "audience")
            expectXML(try await call("PUT", path, listen, body: "{not json"), 400, "JSON")
            expectXML(
                try await call("PUT", path, listen, body: body.replacingOccurrences(of: "fcmV1", with: "gcm")), 400,
                "fcmv1")
            expectXML(try await call("GET", "/huba/installations", listen), 401, "'Manage' claim(s) are required")
            expectXML(try await call("GET", "/huba/export", listen), 401, "'Manage' claim(s) are required")
            // Hub A's keys on hub B: the same key names, other secrets.
            expectXML(try await call("GET", "/hubb/installations/raw-1", full), 401, "InvalidSignature")
            let bFull = NHFixture.token(sr: root, b.full)
            expectXML(try await call("GET", "/hubb/installations/raw-1", bFull), 404, "Installation not found")
            #expect(try await call("GET", path, bFull).status == 401)
            // The query and the export: Manage.
            let list = try await call("GET", "/huba/installations?platform=FCMV1&tag=x%20%26%26%20y", full)
            #expect(list.status == 200 && list.text.contains(#""installationId":"raw-1""#), "\(list.text)")
            let export = try await call("GET", "/huba/export", full)
            #expect(export.status == 200 && export.header("Content-Type") == "application/x-ndjson")
            #expect(export.text.split(separator: "\n").count == 1)
            // A bad tag expression names its position.
            let send = try await live.edge.request(
                "POST", "/huba/messages", authorization: full, bytes: Data(#"{"aps":{"alert":"x"}}"#.utf8),
                contentType: "application/json",
                headers: [("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "x && (y ||")])
            expectXML(send, 400, "at character 11")
            // The hub's installation limit: one more new installation is 429 without Retry-After; a replace is fine.
            let limited = try await runProgram(
                live.configuration.binDirectory + "/herald",
                [
                    "hubs", "limits", "huba", "--max-installations", "1", "--runtime-dir",
                    live.configuration.runtimeDirectory,
                ])
            #expect(limited.status == 0 && limited.output.contains("max installations 1"), "\(limited.error)")
            let over = try await call(
                "PUT", "/huba/installations/raw-2", full, body: body.replacingOccurrences(of: "raw-1", with: "raw-2"))
            expectXML(over, 429, "limit of 1 installations")
            #expect(over.header("Retry-After") == nil)
            #expect(try await call("PUT", path, full, body: body).status == 200)
            // Throttling: repeated bad signatures for one key get 429 with Retry-After, never 403.
            var forged = a.full
            forged = forged.replacingOccurrences(of: NHFixture.secret(a.full).key, with: "guessed-key")
            var last: EdgeClient.Reply?
            for _ in 0..<25 {
                last = try await call("GET", path, NHFixture.token(sr: root, forged))
                if last?.status == 429 { break }
            }
            let throttled = try #require(last)
            expectXML(throttled, 429, "retry after")
            #expect(Int(throttled.header("Retry-After") ?? "") ?? 0 > 0)
        }
    }

    @Test(
        "two hubs with their own APNs keys in one stack: each hub's send reaches only its devices, signed with its own key and topic"
    )
    func twoHubsTwoKeys() async throws {
        try await StackFixture.withProviders { fixture, live in
            let herald = live.configuration.binDirectory + "/herald"
            let dir = ["--runtime-dir", live.configuration.runtimeDirectory]
            // Two more APNs keys, one per hub, each with its own team and topic; the double accepts all three.
            var keys: [String: (kid: String, team: String, topic: String)] = [:]
            for hub in ["huba", "hubb"] {
                let key = P256.Signing.PrivateKey()
                let kid = "KEY" + String(repeating: hub.last!.uppercased(), count: 7)
                let meta = (kid, "TEAM" + String(repeating: hub.last!.uppercased(), count: 6), "com.example.\(hub)")
                try key.pemRepresentation.write(
                    toFile: "\(fixture.folder)/\(hub).p8", atomically: true, encoding: .utf8)
                fixture.extraAPNsKeys.withLock { $0[kid] = (key.publicKey, meta.1, meta.2) }
                keys[hub] = meta
            }
            var connection: [String: String] = [:]
            for hub in ["huba", "hubb"] {
                connection[hub] = try await NHFixture.hub(hub, live).full
                let meta = keys[hub]!
                let set = try await runProgram(
                    herald,
                    [
                        "hubs", "credentials", "set", hub, "apns", "key=@\(fixture.folder)/\(hub).p8",
                        "key-id=\(meta.kid)",
                        "team-id=\(meta.team)",
                        "topic=\(meta.topic)", "url=\(fixture.double.url)",
                    ] + dir)
                #expect(set.status == 0, "\(set.error)")
                #expect(set.output.contains("apns\thub\tkey id \(meta.kid)"), "\(set.output)")
                #expect(!set.output.contains("PRIVATE KEY"))
            }
            // A bad key is refused when set, naming the problem and not the content.
            try "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n".write(
                toFile: "\(fixture.folder)/bad.p8", atomically: true, encoding: .utf8)
            let bad = try await runProgram(
                herald,
                [
                    "hubs", "credentials", "set", "huba", "apns", "key=@\(fixture.folder)/bad.p8", "key-id=K",
                    "team-id=T", "topic=x",
                ] + dir)
            #expect(
                bad.status != 0 && bad.error.contains("not a P-256 private key") && !bad.error.contains("c2VjcmV0"),
                "\(bad.error)")
            // The default hub keeps the deployment's credentials.
            let shown = try await runProgram(herald, ["hubs", "credentials", "show", "default"] + dir)
            #expect(shown.output.contains("apns\tdeployment"), "\(shown.output)")

            // Devices: two per hub and one tutorial registration in the default hub, all tagged "t".
            let tokens = ["huba": [apnsToken(101), apnsToken(102)], "hubb": [apnsToken(201), apnsToken(202)]]
            for (hub, list) in tokens {
                for (n, token) in list.enumerated() {
                    let put = try await live.edge.request(
                        "PUT", "/\(hub)/installations/d\(n)",
                        authorization: NHFixture.token(sr: NHFixture.root(live), connection[hub]!),
                        body: #"{"installationId":"d\#(n)","platform":"apns","pushChannel":"\#(token)","tags":["t"]}"#)
                    #expect(put.status == 200, "\(put.text)")
                }
            }
            try await live.register("alice", handle: apnsToken(1), tags: ["t"])

            var sends: [String: String] = [:]
            for hub in ["huba", "hubb"] {
                let send = try await live.edge.request(
                    "POST", "/\(hub)/messages?api-version=2020-06",
                    authorization: NHFixture.token(sr: NHFixture.root(live), connection[hub]!),
                    bytes: Data(#"{"aps":{"alert":"to \#(hub)"}}"#.utf8), contentType: "application/json;charset=utf-8",
                    headers: [("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "t")])
                #expect(send.status == 201, "\(send.text)")
                let location = try #require(send.header("Location"))
                #expect(
                    location.hasPrefix("\(live.edge.base.absoluteString)/\(hub)/messages/n-")
                        && location.hasSuffix("?api-version=2020-06"))
                sends[hub] = String(location.split(separator: "/").last!.split(separator: "?").first!)
            }
            // Both sends finished (outcomes from herald-dispatch), then what reached APNs is checked whole.
            for (hub, id) in sends {
                let outcome = try await NHFixture.finalOutcome(live, notification: id)
                #expect(outcome.state == .completed && outcome.platforms.first?.success == 2, "\(hub): \(outcome)")
            }
            let apns = fixture.double.requests.filter { $0.path.hasPrefix("/3/device/") }
            #expect(apns.count == 4)
            for request in apns {
                let token = String(request.path.dropFirst("/3/device/".count))
                let hub = try #require(
                    tokens.first { $0.value.contains(token) }?.key, "a push reached \(token), no hub's device")
                let body = String(decoding: request.body, as: UTF8.self)
                #expect(body.contains("to \(hub)"), "\(token) got \(body)")
                #expect(
                    ES256JWT.unverifiedKeyID(String(request.header("authorization")!.dropFirst(7)))
                        == keys[hub]!.kid)
                #expect(request.header("apns-topic") == keys[hub]!.topic)
            }
        }
    }

    @Test(
        "APNs says a channel is dead: the installation is kept with pushChannelExpired, the next send skips it, a new channel clears it"
    )
    func feedbackMarksExpired() async throws {
        try await StackFixture.withProviders { fixture, live in
            let full = try await NHFixture.hub("feedback", live).full
            let herald = live.configuration.binDirectory + "/herald"
            let set = try await runProgram(
                herald,
                [
                    "hubs", "credentials", "set", "feedback", "apns", "key=@\(fixture.folder)/apns.p8",
                    "key-id=\(ProviderFixture.keyID)",
                    "team-id=\(ProviderFixture.teamID)", "topic=\(ProviderFixture.topic)", "url=\(fixture.double.url)",
                    "--runtime-dir",
                    live.configuration.runtimeDirectory,
                ])
            try #require(set.status == 0, "\(set.error)")
            let auth = NHFixture.token(sr: NHFixture.root(live), full)
            let (dead, alive) = (apnsToken(301), apnsToken(302))
            for (id, token) in [("dead", dead), ("alive", alive)] {
                let put = try await live.edge.request(
                    "PUT", "/feedback/installations/\(id)", authorization: auth,
                    body: #"{"installationId":"\#(id)","platform":"apns","pushChannel":"\#(token)","tags":["t"]}"#)
                #expect(put.status == 200, "\(put.text)")
            }
            let since = Int64(Date().timeIntervalSince1970 * 1000) + 1000
            fixture.queue(dead, .json(410, ["reason": "Unregistered", "timestamp": since]))
            func send() async throws -> EdgeClient.Reply {
                try await live.edge.request(
                    "POST", "/feedback/messages", authorization: auth, bytes: Data(#"{"aps":{"alert":"x"}}"#.utf8),
                    contentType: "application/json",
                    headers: [("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "t")])
            }
            #expect(try await send().status == 201)
            // Dispatch reports dead handles from a durable queue: poll the installation.
            var expired = false
            let deadline = ContinuousClock.now + .seconds(15)
            while !expired, ContinuousClock.now < deadline {
                let got = try await live.edge.request("GET", "/feedback/installations/dead", authorization: auth)
                try #require(got.status == 200, "the installation must be kept: \(got.text)")
                expired = try got.json()["pushChannelExpired"] as? Bool == true
                if !expired { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(expired)
            let before = fixture.double.requests.count
            let second = try await send()
            let outcome = try await NHFixture.finalOutcome(live, notification: try #require(second.header("Location")))
            #expect(outcome.platforms.first?.success == 1, "\(outcome)")
            let after = fixture.double.requests.dropFirst(before)
            #expect(after.count == 1 && after.first?.path == "/3/device/\(alive)", "\(after.map(\.path))")
            let patch = try await live.edge.request(
                "PATCH", "/feedback/installations/dead", authorization: auth,
                body: #"[{"op":"replace","path":"/pushChannel","value":"\#(apnsToken(303))"}]"#)
            #expect(patch.status == 200)
            #expect(
                try await live.edge.request("GET", "/feedback/installations/dead", authorization: auth).json()[
                    "pushChannelExpired"]
                    as? Bool == false)
        }
    }

}
