import Crypto
import Foundation
import HeraldModel
import HeraldTestSupport
import StackTestSupport
import Testing

/// A refused request writes nothing, across services: every mutating `/v1/hubs` route and console
/// form is sent each invalid value its body can express, and the hub's whole state (keys and their
/// secrets, limits, credentials, devices) is the same after each refusal as before.
@Suite("refused requests write nothing", .serialized, .timeLimit(.minutes(5)), .watchedForStalls)
struct RefusedWritesTests {
    /// A hub's state as its manager can see it, and whether its original Full key still signs.
    struct State: Equatable, CustomStringConvertible {
        var detail: String
        var devices: String
        var fullKeySigns: Bool
        var description: String { "\(detail)\ndevices: \(devices)\nfull key signs: \(fullKeySigns)" }
    }

    static func state(_ live: LiveStack, hub: String, full: String) async throws -> State {
        let detail = try await live.edge.request("GET", "/v1/hubs/\(hub)", as: "admin")
        try #require(detail.status == 200, "\(detail.text)")
        let root = NHFixture.root(live)
        let devices = try await live.edge.request(
            "GET", "/\(hub)/installations?api-version=2020-06", authorization: NHFixture.token(sr: root, full))
        let probe = try await live.edge.request(
            "GET", "/\(hub)/installations/nobody?api-version=2020-06", authorization: NHFixture.token(sr: root, full))
        // The usage counters and times of the detail are stable while nothing is sent.
        return State(detail: Self.canonical(detail.body), devices: devices.text, fullKeySigns: probe.status == 404)
    }

    /// JSON with sorted keys, so two reads of the same state compare equal.
    static func canonical(_ body: Data) -> String {
        guard let object = try? JSONSerialization.jsonObject(with: body),
            let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        else { return String(decoding: body, as: UTF8.self) }
        return String(decoding: data, as: UTF8.self)
    }

    /// Each invalid limit the OpenAPI document's `Limits` object can express, alone and beside
    /// valid ones (a valid field of one service with an invalid one of the other).
    static let invalidLimits: [String] = {
        var bodies: [String] = []
        for field in [
            "maxInstallations", "requestsPerSecond", "requestBurst", "pushesPerDay", "pushesPerMonth",
            "maxConcurrentPushes", "weight",
        ] {
            bodies.append(#"{"\#(field)":-1}"#)
            bodies.append(#"{"\#(field)":"7"}"#)
            bodies.append(#"{"\#(field)":1.5}"#)
            bodies.append(#"{"\#(field)":99999999999999999999}"#)
        }
        bodies += [
            #"{"requestsPerSecond":1000001}"#, #"{"requestBurst":1000001}"#, #"{"weight":101}"#,
            #"{"requestsPerSecond":7,"maxInstallations":9,"weight":1000}"#,
            #"{"pushesPerDay":5,"requestsPerSecond":-1}"#, #"{"maxInstallations":3,"requestBurst":2000000}"#,
            #"{"pushesPerMonth":8,"maxConcurrentPushes":-2}"#, "[]", "null", "{", #"{"weight":null,"#,
        ]
        return bodies
    }()

    @Test("every mutating /v1/hubs route and console form, sent each invalid value, leaves the hub as it was")
    func nothingWritten() async throws {
        try await LiveStack.with(auth: .accounts, users: ["admin"]) { live in
            #expect(try await live.herald(["hubs", "grant", "default", "admin", "Manage"]).status == 0)
            let edge = live.edge
            let created = try await edge.request(
                "POST", "/v1/hubs", as: "admin", body: #"{"name":"web","limits":{"pushesPerDay":10,"weight":3}}"#)
            try #require(created.status == 201, "\(created.text)")
            let vapid = P256.Signing.PrivateKey().pemRepresentation
            let credentials = try JSONSerialization.data(withJSONObject: [
                "vapidKey": vapid, "subject": "mailto:ops@example.com",
            ])
            let set = try await edge.request(
                "PUT", "/v1/hubs/web/credentials/browser", as: "admin",
                body: String(decoding: credentials, as: UTF8.self))
            try #require(set.status == 200, "\(set.text)")
            #expect(
                try await edge.request("PUT", "/v1/hubs/web/keys/ops", as: "admin", body: #"{"rights":["Send"]}"#)
                    .status == 201)
            let (full, _) = try await NHFixture.hub("web", live, create: false)
            let root = NHFixture.root(live)
            let installation =
                #"{"installationId":"i1","platform":"apns","pushChannel":"\#(apnsToken(1))","tags":["a"]}"#
            let put = try await edge.request(
                "PUT", "/web/installations/i1?api-version=2020-06", authorization: NHFixture.token(sr: root, full),
                body: installation)
            try #require(put.status == 200, "\(put.text)")
            let before = try await Self.state(live, hub: "web", full: full)
            #expect(before.fullKeySigns && before.devices.contains("i1"), "\(before)")

            var refusals = 0
            func refused(_ method: String, _ path: String, _ body: String?, _ what: String) async throws {
                let reply = try await edge.request(method, path, as: "admin", body: body)
                #expect((400..<500).contains(reply.status), "\(method) \(path) \(what): \(reply.status) \(reply.text)")
                let after = try await Self.state(live, hub: "web", full: full)
                #expect(after == before, "\(method) \(path) \(what) changed the hub:\n\(after)")
                refusals += 1
            }

            for body in Self.invalidLimits {
                try await refused("PATCH", "/v1/hubs/web/limits", body, body)
                // A new hub with them: refused, and no hub is left behind (a retry is not a 409).
                // (`"limits": null` is no limits at all: a valid request.)
                guard body != "null" else { continue }
                let create = #"{"name":"other","limits":\#(body)}"#
                try await refused("POST", "/v1/hubs", create, create)
                #expect(try await edge.request("GET", "/v1/hubs/other", as: "admin").status == 404, "\(create)")
            }
            for name in ["..", ".", "web", "api", "-x", String(repeating: "a", count: 51), "a b", "", "é"] {
                let body = try String(
                    decoding: JSONSerialization.data(withJSONObject: ["name": name]), as: UTF8.self)
                try await refused("POST", "/v1/hubs", body, "name \(name)")
            }
            for key in ["..", ".", "%2E%2E", "a%20b", String(repeating: "k", count: 257), "%C3%A9"] {
                try await refused("PUT", "/v1/hubs/web/keys/\(key)", #"{"rights":["Listen"]}"#, "key \(key)")
            }
            for rights in [#"{"rights":[]}"#, #"{"rights":["Bogus"]}"#, #"{"rights":"Listen"}"#, "{}", "[", "null"] {
                try await refused("PUT", "/v1/hubs/web/keys/ops", rights, rights)
                try await refused("PUT", "/v1/hubs/web/keys/newkey", rights, rights)
            }
            try await refused("POST", "/v1/hubs/web/keys/ops/rotate?which=tertiary", nil, "which")
            try await refused("POST", "/v1/hubs/web/keys/nokey/rotate", nil, "unknown key")
            try await refused("DELETE", "/v1/hubs/web/keys/nokey", nil, "unknown key")
            for (platform, body) in [
                ("browser", #"{"vapidKey":"nope","subject":"mailto:ops@example.com"}"#),
                ("browser", #"{"vapidKey":"\#(vapid.replacingOccurrences(of: "\n", with: "\\n"))","subject":"x"}"#),
                ("apns", #"{"keyIdentifier":"x"}"#),
                ("apns", #"{"keyId":"K","teamId":"T","bundleId":"b","key":"nope"}"#),
                ("fcm", #"{"serviceAccount":"{}","url":"http://10.0.0.1/"}"#), ("fcm", #"{"serviceAccount":"nope"}"#),
                ("wns", #"{"packageSid":"x"}"#), ("sms", "{}"), ("browser", "[]"), ("browser", "{"),
            ] {
                try await refused("PUT", "/v1/hubs/web/credentials/\(platform)", body, "\(platform) \(body)")
            }
            try await refused("DELETE", "/v1/hubs/web/credentials/sms", nil, "platform")
            try await refused("DELETE", "/v1/hubs/nohub", nil, "unknown hub")

            // The console's forms, signed in as the same operator.
            let browser = ConsoleTests.Browser(live)
            let signedIn = try await browser.signIn("admin", EdgeClient.password(of: "admin", in: .accounts))
            try #require(signedIn.status == 303, "\(signedIn.text)")
            let page = try await browser.get("/console/hubs/web")
            let csrf = try ConsoleTests.Browser.csrf(page)
            func refusedForm(_ path: String, _ fields: [String: String], multipart: Bool = false) async throws {
                let form = fields.merging(["_csrf": csrf]) { $1 }
                let reply = try await multipart ? browser.postMultipart(path, form) : browser.post(path, form)
                #expect(
                    (400..<500).contains(reply.status), "\(path) \(fields): \(reply.status) \(reply.text.prefix(300))")
                let after = try await Self.state(live, hub: "web", full: full)
                #expect(after == before, "\(path) \(fields) changed the hub:\n\(after)")
                refusals += 1
            }
            for limit in ["-1", "x", "1.5", "99999999999999999999"] {
                try await refusedForm("/console/hubs", ["name": "other", "max_installations": limit])
            }
            for name in ["..", ".", "web", "api", "a b", ""] {
                try await refusedForm("/console/hubs", ["name": name])
            }
            #expect(try await edge.request("GET", "/v1/hubs/other", as: "admin").status == 404)
            for name in ["..", ".", "ops", "a b", String(repeating: "k", count: 257)] {
                try await refusedForm("/console/hubs/web/keys", ["name": name, "listen": "on"])
            }
            try await refusedForm("/console/hubs/web/keys", ["name": "norights"])
            try await refusedForm("/console/hubs/web/keys/ops/rotate", ["which": "tertiary"])
            try await refusedForm("/console/hubs/web/keys/nokey/rotate", ["which": "primary"])
            try await refusedForm("/console/hubs/web/keys/nokey/revoke", [:])
            try await refusedForm("/console/hubs/web/delete", ["confirm": "wrong"])
            try await refusedForm("/console/hubs/web/credentials/browser", ["subject": "x"], multipart: true)
            try await refusedForm(
                "/console/hubs/web/credentials/apns", ["keyId": "K", "teamId": "T", "bundleId": "b"], multipart: true)
            try await refusedForm("/console/hubs/web/credentials/sms", [:], multipart: true)
            try await refusedForm("/console/hubs/web/credentials/sms/delete", [:])
            #expect(refusals > 100, "\(refusals) refusals")
        }
    }
}
