import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import NotificationHubs
import Testing

/// NH installations: the JSON every SDK sends and JSON-Patch, as NotificationHubs reads and
/// validates them (how herald-registration stores them: RegistrationServiceTests).
@Suite("installation JSON and JSON-Patch", .watchedForStalls)
struct InstallationFormatTests {
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
}
