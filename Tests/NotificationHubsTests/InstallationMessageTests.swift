import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import NotificationHubs
import Testing

/// An installation as it crosses the RPC: herald-edge reads NH's JSON into `HubInstallation` and
/// JSON-Patch into operations; herald-registration takes them with the same checks NH's JSON gets,
/// since any gRPC client may send them; herald-edge writes NH's JSON back from the answer.
@Suite("installations across the RPC", .watchedForStalls)
struct InstallationMessageTests {
    static let hosts = InstallationFormatTests.hosts
    static let token = InstallationFormatTests.token
    static let full = #"""
        {"installationId":"dev-1","userId":"alice@example","platform":"apns","pushChannel":"\#(token)",
         "tags":["news","sports"],"pushVariables":{"b":"2","a":"1"},
         "templates":{"t2":{"body":"{\"aps\":{\"alert\":\"$(m)\"}}","headers":{"apns-priority":"5"},"expiry":"$(exp)"},
                      "t1":{"body":"{}","tags":["x"]}}}
        """#

    @Test(
        "NH's JSON read at the edge, as a message, taken by registration: the same installation as NH's JSON parsed there"
    )
    func sameInstallation() throws {
        let read = try Installation.read(Array(Self.full.utf8), id: "dev-1")
        let message = read.message
        #expect(message.pushVariables.map(\.name) == ["a", "b"] && message.templates.map(\.name) == ["t1", "t2"])
        #expect(message.templates[1].hasExpiry && !message.templates[0].hasExpiry)
        let taken = try Installation(request: message, id: "dev-1")
        try taken.validate(hosts: Self.hosts)
        #expect(taken == (try Installation.parse(Array(Self.full.utf8), id: "dev-1", hosts: Self.hosts)))
        // And back to the same JSON through an answer.
        var stored = taken
        stored.pushChannelExpired = true
        stored.lastUpdate = 1_704_067_200_123
        #expect(try Installation(answer: stored.message).json() == stored.json())
    }

    @Test("a browser's channel crosses as its subscription's JSON, in one canonical form")
    func browser() throws {
        let json = #"""
            {"installationId":"web-1","platform":"browser",
             "pushChannel":{"endpoint":"https://fcm.googleapis.com/fcm/send/x","p256dh":"\#(InstallationFormatTests.p256dh)","auth":"AAAAAAAAAAAAAAAAAAAAAA"}}
            """#
        let read = try Installation.read(Array(json.utf8), id: "web-1")
        let taken = try Installation(request: read.message, id: "web-1")
        #expect(taken.pushChannel == read.pushChannel && taken.pushChannel.hasPrefix(#"{"endpoint":"#))
        var reordered = read.message
        reordered.pushChannel =
            #"{"keys":{"auth":"AAAAAAAAAAAAAAAAAAAAAA","p256dh":"\#(InstallationFormatTests.p256dh)"},"endpoint":"https://fcm.googleapis.com/fcm/send/x"}"#
        #expect(try Installation(request: reordered, id: "web-1").pushChannel == read.pushChannel)
    }

    @Test(
        "a message gets NH's JSON's checks: the path's id, a platform, a channel, user ids, tags, template names, nothing named twice"
    )
    func refused() throws {
        let good = try Installation.read(Array(Self.full.utf8), id: "dev-1").message
        var cases: [(String, HubInstallation, String)] = []
        func with(_ reason: String, _ change: (inout HubInstallation) -> Void) {
            var message = good
            change(&message)
            cases.append((reason, message, "dev-1"))
        }
        with("differs from the id in the path") { $0.installationID = "dev-2" }
        with("platform must be") { $0.platform = .unspecified }
        with("platform must be") { $0.platform = .unrecognized(9) }
        with("pushChannel") { $0.pushChannel = "" }
        with("userId") { $0.userID = "a b" }
        with("tag") { $0.tags = ["no spaces"] }
        with("given twice") {
            $0.pushVariables = [
                HubRegistrationField(name: "a", value: "1"), HubRegistrationField(name: "a", value: "2"),
            ]
        }
        with("given twice") { $0.templates.append($0.templates[0]) }
        with("template name") { $0.templates[0].name = "bad name" }
        with("tag") { $0.templates[0].tags = ["{x}"] }
        with("given twice") {
            $0.templates[0].headers = [
                HubRegistrationField(name: "h", value: "1"), HubRegistrationField(name: "h", value: "2"),
            ]
        }
        cases.append(("installationId must be", good, ""))
        for (reason, message, id) in cases {
            let refusal = InstallationFormatTests.message { try Installation(request: message, id: id) }
            #expect(refusal?.contains(reason) == true, "\(reason): \(refusal ?? "taken")")
        }
        // What only registration knows is checked there: the allowed hosts, the templates' bodies.
        var evil = good
        evil.platform = .wns
        evil.pushChannel = "https://evil.example/channel"
        let taken = try Installation(request: evil, id: "dev-1")
        #expect(throws: ServiceError.self) { try taken.validate(hosts: Self.hosts) }
        var broken = good
        broken.templates[0].body = "{ $(unclosed"
        #expect(throws: ServiceError.self) {
            try Installation(request: broken, id: "dev-1").validate(hosts: Self.hosts)
        }
    }

    @Test("JSON-Patch read at the edge into operations patches exactly as the JSON applied where it is stored")
    func patches() throws {
        let base = try Installation.parse(Array(Self.full.utf8), id: "dev-1", hosts: Self.hosts)
        let patches = [
            #"[{"op":"add","path":"/tags","value":"extra"},{"op":"remove","path":"/tags/news"}]"#,
            #"[{"op":"replace","path":"/tags","value":["a","b"]},{"op":"add","path":"/pushVariables/c","value":"3"}]"#,
            #"[{"op":"add","path":"/templates/t3","value":"{\"body\":\"{}\",\"tags\":[\"y\"]}"}]"#,
            #"[{"op":"add","path":"/templates/t3","value":{"body":"{}","headers":{"apns-priority":"10"}}}]"#,
            #"[{"op":"REPLACE","path":"/userId","value":"bob"},{"op":"remove","path":"/templates/t1"}]"#,
            #"[{"op":"replace","path":"/templates/t2/expiry","value":"2030-01-01T00:00:00Z"}]"#,
            #"[{"op":"add","path":"/tags","value":"x"},{"op":"add","path":"/pushChannel","value":null}]"#,
            #"[{"op":"add","path":"/tags","value":7}]"#, #"[{"op":"move","path":"/tags"}]"#, "[1]", "{}",
        ]
        for patch in patches {
            var viaJSON = base
            var viaOperations = base
            let json = InstallationFormatTests.message {
                try viaJSON.apply(patch: Array(patch.utf8), hosts: Self.hosts)
            }
            let operations = InstallationFormatTests.message {
                try viaOperations.apply(
                    operations: try Installation.patchOperations(Array(patch.utf8)), hosts: Self.hosts)
            }
            #expect(json == operations, "\(patch)")
            #expect(viaJSON == viaOperations, "\(patch)")
        }
    }

    @Test("operations: each value as JSON text, none for null or absent; at most 200; a value that is not JSON refused")
    func operations() throws {
        let read = try Installation.patchOperations(
            Array(
                #"[{"op":"add","path":"/tags","value":"a/b"},{"op":"remove","path":"/userId","value":null},{"op":"add","path":"/pushVariables","value":{"k":"v"}}]"#
                    .utf8))
        #expect(read.map(\.valueJson) == [#""a/b""#, "", #"{"k":"v"}"#])
        let many = "[" + Array(repeating: #"{"op":"add","path":"/tags/t"}"#, count: 201).joined(separator: ",") + "]"
        #expect(
            InstallationFormatTests.message { try Installation.patchOperations(Array(many.utf8)) }?.contains("200")
                == true)
        var installation = try Installation.parse(Array(Self.full.utf8), id: "dev-1", hosts: Self.hosts)
        let before = installation
        for bad in [
            InstallationPatchOperation(op: "add", path: "/tags", valueJson: "{not json"),
            InstallationPatchOperation(op: "add", path: "/tags", valueJson: "\"unterminated"),
        ] {
            let refusal = InstallationFormatTests.message {
                try installation.apply(operations: [bad], hosts: Self.hosts)
            }
            #expect(refusal?.contains("the value is not JSON") == true, "\(refusal ?? "taken")")
        }
        let tooMany = Array(repeating: InstallationPatchOperation(op: "add", path: "/tags/t"), count: 201)
        #expect(throws: ServiceError.self) { try installation.apply(operations: tooMany, hosts: Self.hosts) }
        #expect(installation == before, "refused operations change nothing")
    }

    @Test("3,000 near misses of NH's JSON and of JSON-Patch: the RPC's way takes exactly what the JSON's way takes")
    func nearMisses() async throws {
        var state: UInt64 = 48
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        let alphabet = Array(#"{}[]":, \/$()#@.-_xX0{"#.unicodeScalars)
        func mutate(_ text: String) -> [UInt8] {
            var scalars = Array(text.unicodeScalars)
            for _ in 0..<(1 + next(3)) {
                let at = next(scalars.count)
                switch next(3) {
                case 0: scalars.remove(at: at)
                case 1: scalars.insert(alphabet[next(alphabet.count)], at: at)
                default: scalars[at] = alphabet[next(alphabet.count)]
                }
            }
            var view = String.UnicodeScalarView()
            view.append(contentsOf: scalars)
            return Array(String(view).utf8)
        }
        let base = try Installation.parse(Array(Self.full.utf8), id: "dev-1", hosts: Self.hosts)
        let patch =
            #"[{"op":"add","path":"/templates/t3","value":{"body":"{}","tags":["y"]}},{"op":"remove","path":"/tags/news"}]"#
        var taken = (json: 0, patches: 0)
        for round in 0..<1500 {
            // A turn of the pool now and then, so 3,000 parses never hold it for long.
            if round % 50 == 0 { await Task.yield() }
            let body = mutate(Self.full)
            let direct = try? Installation.parse(body, id: "dev-1", hosts: Self.hosts)
            let viaMessage = (try? Installation.read(body, id: "dev-1")).flatMap { read in
                (try? Installation(request: read.message, id: "dev-1")).flatMap { taken in
                    (try? taken.validate(hosts: Self.hosts)).map { taken }
                }
            }
            #expect(direct == viaMessage, "\(String(decoding: body, as: UTF8.self))")
            if direct != nil { taken.json += 1 }

            let patchBytes = mutate(patch)
            var viaJSON = base
            var viaOperations = base
            let jsonTaken = (try? viaJSON.apply(patch: patchBytes, hosts: Self.hosts)) != nil
            let operationsTaken =
                (try? Installation.patchOperations(patchBytes)).map { operations in
                    (try? viaOperations.apply(operations: operations, hosts: Self.hosts)) != nil
                } ?? false
            #expect(
                jsonTaken == operationsTaken && viaJSON == viaOperations,
                "\(String(decoding: patchBytes, as: UTF8.self))")
            if jsonTaken { taken.patches += 1 }
        }
        // The mutations must reach both sides of the line for the comparison to mean something.
        #expect(taken.json > 30 && taken.json < 1470 && taken.patches > 10 && taken.patches < 1490, "\(taken)")
    }
}
