import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldTestSupport
import NotificationHubs
import RegistrationService
import Testing

/// NH installations: the JSON every SDK sends, JSON-Patch, and how the store keeps them.
@Suite("installations")
struct InstallationTests {
    static let hosts = RegistrationRules.PushHosts(wns: ["notify.windows.com"], webPush: ["fcm.googleapis.com"])
    static let token = String(repeating: "ab", count: 32)
    /// RFC 8291's example subscription key.
    static let p256dh = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"

    static func parse(_ json: String, id: String = "dev-1") throws -> Installation {
        try Installation.parse(Array(json.utf8), id: id, hosts: hosts)
    }

    static func object(_ installation: Installation) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(try installation.json())) as? [String: Any])
    }

    static func message(_ body: () throws -> Any) -> String? {
        do {
            _ = try body()
            return nil
        } catch let error as ServiceError {
            #expect(error.code == .invalidArgument, "\(error)")
            return error.message
        } catch {
            return "\(error)"
        }
    }

    @Test("lenient where the SDKs differ: platform case, userId/userID, browser channel as object or string")
    func lenient() throws {
        for platform in ["apns", "APNS", "Apns"] {
            #expect(
                try Self.parse(#"{"installationId":"dev-1","platform":"\#(platform)","pushChannel":"\#(Self.token)"}"#)
                    .platform == .apns)
        }
        #expect(
            try Self.parse(#"{"installationId":"dev-1","platform":"FCMV1","pushChannel":"tok:en"}"#).platform == .fcm)
        let user = try Self.parse(
            #"{"installationId":"dev-1","platform":"fcmV1","pushChannel":"t","userID":"alice@example.com"}"#)
        #expect(user.userID == "alice@example.com")
        let channel =
            #"{"endpoint":"https://fcm.googleapis.com/fcm/send/abc","p256dh":"\#(Self.p256dh)","auth":"BTBZMqHH6r4Tts7J_aSIgg"}"#
        let asObject = try Self.parse(#"{"installationId":"dev-1","platform":"browser","pushChannel":\#(channel)}"#)
        let asString = try Self.parse(
            #"{"installationId":"dev-1","platform":"browser","pushChannel":"\#(channel.replacingOccurrences(of: "\"", with: "\\\""))"}"#
        )
        #expect(asObject == asString)
        #expect(asObject.pushChannel.contains(#""keys":{"auth":"BTBZMqHH6r4Tts7J_aSIgg","p256dh":"\#(Self.p256dh)"}"#))
        // Read-only fields are ignored on write.
        let readOnly = try Self.parse(
            #"{"installationId":"dev-1","platform":"apns","pushChannel":"\#(Self.token)","pushChannelExpired":true,"expirationTime":"2020-01-01T00:00:00Z"}"#
        )
        #expect(!readOnly.pushChannelExpired)
        // GET: NH's field names, browser channel as JS sends it, expirationTime never.
        let out = try Self.object(asObject)
        #expect(
            out["platform"] as? String == "browser"
                && out["expirationTime"] as? String == "9999-12-31T23:59:59.9999999Z")
        #expect((out["pushChannel"] as? [String: String])?["p256dh"] == Self.p256dh)
        #expect(out["tags"] == nil)
    }

    @Test("strict where NH lets bad data in: legacy platforms, id mismatch, bad ids, tags NH would never match")
    func strict() throws {
        #expect(
            Self.message { try Self.parse(#"{"installationId":"dev-1","platform":"gcm","pushChannel":"t"}"#) }?
                .contains("fcmv1") == true)
        #expect(
            Self.message { try Self.parse(#"{"installationId":"dev-1","platform":"fcm","pushChannel":"t"}"#) }?
                .contains("fcmv1") == true)
        #expect(
            Self.message { try Self.parse(#"{"installationId":"dev-1","platform":"mpns","pushChannel":"t"}"#) } != nil)
        #expect(
            Self.message {
                try Self.parse(#"{"installationId":"dev-2","platform":"apns","pushChannel":"\#(Self.token)"}"#)
            }?.contains(
                "differs") == true)
        #expect(
            Self.message {
                try Self.parse(#"{"installationId":"a:b","platform":"apns","pushChannel":"\#(Self.token)"}"#, id: "a:b")
            } != nil
        )
        #expect(
            Self.message {
                try Self.parse(
                    #"{"installationId":"dev-1","platform":"apns","pushChannel":"\#(Self.token)","tags":["a,b"]}"#)
            }?
            .contains("a,b") == true)
        #expect(
            Self.message {
                try Self.parse(
                    #"{"installationId":"dev-1","platform":"apns","pushChannel":"\#(Self.token)","tags":["username:bob"]}"#
                )
            }?
            .contains("reserved") == true)
        #expect(
            Self.message { try Self.parse(#"{"installationId":"dev-1","platform":"apns","pushChannel":"zz"}"#) }?
                .contains("pushChannel")
                == true)
        let tooMany = (0...60).map { "\"t\($0)\"" }.joined(separator: ",")
        #expect(
            Self.message {
                try Self.parse(
                    #"{"installationId":"dev-1","platform":"apns","pushChannel":"\#(Self.token)","tags":[\#(tooMany)]}"#
                )
            } != nil)
        #expect(Self.message { try Self.parse("[]") } != nil)
    }

    @Test("JSON-Patch: add/remove/replace on NH's paths, values as strings or JSON, the template name among its tags")
    func patch() throws {
        var installation = try Self.parse(
            #"{"installationId":"dev-1","platform":"apns","pushChannel":"\#(Self.token)","tags":["a"]}"#)
        let patch = #"""
            [{"op":"add","path":"/tags","value":"b"},
             {"op":"add","path":"/tags","value":"[\"c\",\"d\"]"},
             {"op":"add","path":"/tags","value":["e"]},
             {"op":"remove","path":"/tags/a"},
             {"op":"add","path":"/userId","value":"carol"},
             {"op":"add","path":"/templates/hello","value":"{\"body\":\"{\\\"aps\\\":{\\\"alert\\\":\\\"$(msg)\\\"}}\"}"},
             {"op":"replace","path":"/templates/hello/tags","value":["en"]},
             {"op":"add","path":"/pushVariables/lang","value":"en"}]
            """#
        try installation.apply(patch: Array(patch.utf8), hosts: Self.hosts)
        #expect(installation.tags == ["b", "c", "d", "e"])
        #expect(installation.userID == "carol")
        #expect(installation.templates["hello"]?.tags == ["en", "hello"])
        #expect(installation.templates["hello"]?.body == #"{"aps":{"alert":"$(msg)"}}"#)
        #expect(installation.pushVariables == ["lang": "en"])
        try installation.apply(
            patch: Array(#"[{"op":"replace","path":"/tags","value":["z"]},{"op":"remove","path":"/userId"}]"#.utf8),
            hosts: Self.hosts)
        #expect(installation.tags == ["z"] && installation.userID == nil)
        installation.pushChannelExpired = true
        let other = String(repeating: "cd", count: 32)
        try installation.apply(
            patch: Array(#"[{"op":"replace","path":"/pushChannel","value":"\#(other)"}]"#.utf8), hosts: Self.hosts)
        #expect(installation.pushChannel == other && !installation.pushChannelExpired)
        // Refused, and the error names the operation.
        for bad in [
            #"[{"op":"move","path":"/tags","value":"x"}]"#, #"[{"op":"add","path":"/secret","value":"x"}]"#,
            #"[{"op":"remove","path":"/pushChannel"}]"#, #"[{"op":"replace","path":"/tags","value":"a,b"}]"#,
            #"[{"op":"remove","path":"/tags/nope"}]"#, #"{"op":"add"}"#,
            #"[{"op":"add","path":"/pushChannel","value":"zz"}]"#,
        ] {
            var copy = installation
            #expect(Self.message { try copy.apply(patch: Array(bad.utf8), hosts: Self.hosts) } != nil, "\(bad)")
            #expect(copy.pushChannel == installation.pushChannel)
        }
    }

    @Test(
        "PUT and PATCH share one validation of the whole result: a patch of a template's part is checked as a PUT would be"
    )
    func patchValidatesTheResult() throws {
        var installation = try Self.parse(
            #"{"installationId":"dev-1","platform":"apns","pushChannel":"\#(Self.token)","templates":{"tmpl":{"body":"{\"aps\":{\"alert\":\"$(msg)\"}}"}}}"#
        )
        let broken = #"{\"aps\":{\"alert\":\"$(msg\"}}"#
        // The PUT of that body is refused...
        #expect(
            Self.message {
                _ = try Self.parse(
                    #"{"installationId":"dev-1","platform":"apns","pushChannel":"\#(Self.token)","templates":{"tmpl":{"body":"\#(broken)"}}}"#
                )
            }?.contains("template tmpl body") == true)
        // ...and so is each patch that would leave it, or a bad header or expiry, in place.
        for bad in [
            #"[{"op":"replace","path":"/templates/tmpl/body","value":"\#(broken)"}]"#,
            #"[{"op":"add","path":"/templates/tmpl/headers","value":{"apns-expiration":"$(x"}}]"#,
            // Plain values a send would refuse (NHHeaders' rules, shared with direct sends).
            #"[{"op":"add","path":"/templates/tmpl/headers","value":{"apns-priority":"7"}}]"#,
            #"[{"op":"add","path":"/templates/tmpl/headers","value":{"X-Apns-Priority":"1"}}]"#,
            #"[{"op":"add","path":"/templates/tmpl/headers","value":{"X-WNS-Type":"wns/foo"}}]"#,
            #"[{"op":"add","path":"/templates/tmpl/expiry","value":"{$(x"}]"#,
            #"[{"op":"add","path":"/templates/other","value":{"body":"\#(broken)"}}]"#,
        ] {
            var copy = installation
            let message = Self.message { try copy.apply(patch: Array(bad.utf8), hosts: Self.hosts) }
            #expect(message?.contains("template") == true, "\(bad): \(String(describing: message))")
            #expect(copy == installation)
        }
        // A row stored before this rule still reads back: reads never fail on what a write let in.
        installation.templates["tmpl"]?.body = #"{"aps":{"alert":"$(msg"}}"#
        let stored = try Installation.stored(try installation.json())
        #expect(stored.templates["tmpl"]?.body == installation.templates["tmpl"]?.body)
    }

    @Test(
        "the store: read-your-writes, system tags, hubs apart, feedback marks expired and sends skip it, lists page by id",
        arguments: StoreBackend.available)
    func store(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            for n in 0..<5 {
                try await store.putInstallation(
                    hub: "app1",
                    try Self.parse(
                        #"{"installationId":"d\#(n)","platform":"apns","pushChannel":"\#(String(format: "%064x", n))","userId":"u\#(n % 2)","tags":["t\#(n % 3)"]}"#,
                        id: "d\(n)"))
            }
            try await store.putInstallation(
                hub: "app2",
                try Self.parse(#"{"installationId":"d0","platform":"apns","pushChannel":"\#(Self.token)"}"#, id: "d0"))
            #expect(try await store.installation(hub: "app1", id: "d3")?.userID == "u1")
            #expect(try await store.installation(hub: "app2", id: "d0")?.pushChannel == Self.token)
            #expect(try await store.installation(hub: "app3", id: "d0") == nil)
            func audience(_ text: String, hub: String = "app1") async throws -> [String] {
                try await store.audience(
                    expression: TagExpression(text), platform: .unspecified, hub: hub, after: "", limit: 100
                ).map(
                    \.installationID
                )
                .sorted()
            }
            #expect(try await audience("$InstallationId:{d2}") == ["d2"])
            #expect(try await audience("$userid:{u1}") == ["d1", "d3"])
            #expect(try await audience("$UserId:{u0} && !t0") == ["d2", "d4"])
            #expect(try await audience("$InstallationId:{d0}", hub: "app2") == ["d0"])

            // Feedback: marked expired, kept, skipped by sends; the same channel again keeps the mark, a new one clears it.
            #expect(
                try await store.removeHandle(platform: .apns, handle: String(format: "%064x", 2), invalidSince: 0) == 1)
            #expect(try await store.installation(hub: "app1", id: "d2")?.pushChannelExpired == true)
            #expect(try await audience("$InstallationId:{d2}") == [])
            var d2 = try #require(try await store.installation(hub: "app1", id: "d2"))
            d2.tags = ["t9"]
            #expect(try await store.putInstallation(hub: "app1", d2).pushChannelExpired)
            d2.pushChannel = String(repeating: "ef", count: 32)
            #expect(try await !store.putInstallation(hub: "app1", d2).pushChannelExpired)
            #expect(try await audience("t9") == ["d2"])

            // Lists: filters in SQL, pages in installation id order.
            let all = try await store.listInstallations(
                hub: "app1", expression: nil, userID: nil, platform: .unspecified, after: "", limit: 3)
            #expect(all.map(\.installationID) == ["d0", "d1", "d2"])
            let next = try await store.listInstallations(
                hub: "app1", expression: nil, userID: nil, platform: .unspecified, after: "d2", limit: 3)
            #expect(next.map(\.installationID) == ["d3", "d4"])
            #expect(
                try await store.listInstallations(
                    hub: "app1", expression: TagExpression("t1"), userID: "u0", platform: .apns, after: "", limit: 9
                )
                .map(\.installationID) == ["d4"])

            #expect(try await store.deleteInstallation(hub: "app1", id: "d0"))
            #expect(try await !store.deleteInstallation(hub: "app1", id: "d0"))
            #expect(try await store.installation(hub: "app2", id: "d0") != nil)
            let export = try await store.exportPage(hub: "app1", after: "", limit: 100)
            #expect(export.count == 4)
            #expect(
                String(decoding: export.lines, as: UTF8.self).split(separator: "\n").allSatisfy {
                    $0.contains(#""kind":"installation""#)
                })
        }
    }

    @Test(
        "a hub's installation limit: one more new installation is RESOURCE_EXHAUSTED; replacing one, and other hubs, are not",
        arguments: StoreBackend.available)
    func limit(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            func put(_ id: String, hub: String = "small", limit: Int64 = 2) async throws {
                try await store.putInstallation(
                    hub: hub,
                    try Self.parse(
                        #"{"installationId":"\#(id)","platform":"apns","pushChannel":"\#(Self.token)"}"#, id: id),
                    maxInstallations: limit)
            }
            try await put("a")
            try await put("b")
            await #expect(throws: Never.self) { try await put("a") }
            do {
                try await put("c")
                Issue.record("a third installation was accepted over the limit")
            } catch let error as ServiceError {
                #expect(
                    error.code == .resourceExhausted && error.retryAfterSeconds == nil
                        && error.message.contains("limit of 2"), "\(error)")
            }
            await #expect(throws: Never.self) { try await put("c", hub: "other") }
            await #expect(throws: Never.self) { try await put("c", limit: 0) }
            #expect(
                try await store.listInstallations(
                    hub: "small", expression: nil, userID: nil, platform: .unspecified, after: "", limit: 9
                )
                .count == 3)
        }
    }
}
