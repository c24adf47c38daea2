import Crypto
import Foundation
import HeraldTestSupport
import StackTestSupport
import Testing

/// Hubs, keys, credentials and limits over HTTP (`/v1/hubs…`), on the whole stack.
@Suite("hubs over HTTP", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct HubAPITests {
    static func json(_ reply: EdgeClient.Reply) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: reply.body) as? [String: Any], "\(reply.text)")
    }

    @Test(
        "an administrator makes a hub with limits; its secrets are shown once; Manage on a hub is that hub's only; strangers learn nothing"
    )
    func hubs() async throws {
        try await LiveStack.with(auth: .accounts, users: ["admin", "alice"]) { live in
            #expect(try await live.herald(["hubs", "grant", "default", "admin", "Manage"]).status == 0)
            let edge = live.edge

            // Without Manage: no hub listed, none made, none read, whether it exists or not.
            #expect(try await edge.request("GET", "/v1/hubs", as: "alice").text == #"{"hubs":[]}"#)
            #expect(try await edge.request("POST", "/v1/hubs", as: "alice", body: #"{"name":"x"}"#).status == 403)
            #expect(try await edge.request("GET", "/v1/hubs/default", as: "alice").status == 403)
            #expect(try await edge.request("GET", "/v1/hubs/nowhere", as: "alice").status == 403)
            #expect(try await edge.request("GET", "/v1/hubs", authorization: "Basic eDp5").status == 401)

            let made = try await edge.request(
                "POST", "/v1/hubs", as: "admin",
                body: #"{"name":"app-one","limits":{"pushesPerMonth":1000,"weight":2}}"#)
            #expect(made.status == 201, "\(made.text)")
            #expect(made.header("Location") == "/v1/hubs/app-one" && made.header("Cache-Control") == "no-store")
            let hub = try Self.json(made)
            let keys = try #require(hub["keys"] as? [[String: Any]])
            let full = try #require(keys.first { $0["name"] as? String == "DefaultFullSharedAccessSignature" })
            #expect(full["rights"] as? [String] == ["Listen", "Manage", "Send"])
            let connection = try #require(full["primaryConnectionString"] as? String)
            let secret = try #require(full["primaryKey"] as? String)
            #expect(connection.hasPrefix("Endpoint=sb://") && connection.contains(secret))
            let limits = try #require(hub["limits"] as? [String: Any])
            #expect(limits["pushesPerMonth"] as? Int == 1000 && limits["weight"] as? Int == 2, "\(limits)")
            #expect(try await edge.request("POST", "/v1/hubs", as: "admin", body: #"{"name":"APP-ONE"}"#).status == 409)
            #expect(
                try await edge.request("POST", "/v1/hubs", as: "admin", body: #"{"name":"bad name!"}"#).status == 400)
            #expect(try await edge.request("POST", "/v1/hubs", as: "admin", body: #"{"name":7}"#).status == 400)

            // Read back: no secret.
            let shown = try await edge.request("GET", "/v1/hubs/app-one", as: "admin")
            #expect(shown.status == 200 && !shown.text.contains("primaryKey") && shown.text.contains("DefaultFull"))
            #expect(try await edge.request("GET", "/v1/hubs/nowhere", as: "admin").status == 404)

            // Manage on app-one: that hub's routes, not another's, not making hubs.
            #expect(try await live.herald(["hubs", "grant", "app-one", "alice", "Manage"]).status == 0)
            let listed = try Self.json(try await edge.request("GET", "/v1/hubs", as: "alice"))
            #expect((listed["hubs"] as? [[String: Any]])?.compactMap { $0["name"] as? String } == ["app-one"])
            #expect(try await edge.request("GET", "/v1/hubs/app-one", as: "alice").status == 200)
            #expect(try await edge.request("GET", "/v1/hubs/default/limits", as: "alice").status == 403)
            #expect(try await edge.request("POST", "/v1/hubs", as: "alice", body: #"{"name":"app-two"}"#).status == 403)

            // The hub default cannot be deleted.
            #expect(try await edge.request("DELETE", "/v1/hubs/default", as: "admin").status == 400)
            let deleted = try await edge.request("DELETE", "/v1/hubs/app-one", as: "alice")
            #expect(deleted.status == 200 && deleted.text.contains(#""devices":0"#), "\(deleted.text)")
            #expect(try await edge.request("GET", "/v1/hubs/app-one", as: "admin").status == 404)
        }
    }

    @Test("a key made over HTTP signs NH requests; rotating its secret and revoking it stop the old tokens at once")
    func keys() async throws {
        try await LiveStack.with(auth: .accounts, users: ["admin"]) { live in
            #expect(try await live.herald(["hubs", "grant", "default", "admin", "Manage"]).status == 0)
            let edge = live.edge
            #expect(try await edge.request("POST", "/v1/hubs", as: "admin", body: #"{"name":"keyed"}"#).status == 201)
            let made = try await edge.request(
                "PUT", "/v1/hubs/keyed/keys/Devices", as: "admin", body: #"{"rights":["Listen"]}"#)
            #expect(made.status == 201 && made.header("Cache-Control") == "no-store", "\(made.text)")
            let first = try #require(try Self.json(made)["primaryConnectionString"] as? String)
            let root = NHFixture.root(live)
            func get(_ connection: String) async throws -> Int {
                try await edge.request(
                    "GET", "/keyed/installations/nobody?api-version=2020-06",
                    authorization: NHFixture.token(sr: root, connection)
                ).status
            }
            #expect(try await get(first) == 404, "Listen reads an installation (none here)")
            // Changing its rights keeps its secrets, and shows none.
            let changed = try await edge.request(
                "PUT", "/v1/hubs/keyed/keys/Devices", as: "admin", body: #"{"rights":["Listen","Send"]}"#)
            #expect(changed.status == 200 && !changed.text.contains("primaryKey"), "\(changed.text)")
            #expect(try await get(first) == 404)
            #expect(
                try await edge.request("PUT", "/v1/hubs/keyed/keys/Devices", as: "admin", body: #"{"rights":["Own"]}"#)
                    .status == 400)
            #expect(
                try await edge.request("PUT", "/v1/hubs/keyed/keys/Devices", as: "admin", body: #"{"rights":[]}"#)
                    .status == 400)

            let rotated = try await edge.request("POST", "/v1/hubs/keyed/keys/Devices/rotate", as: "admin")
            #expect(rotated.status == 200, "\(rotated.text)")
            let second = try #require(try Self.json(rotated)["primaryConnectionString"] as? String)
            #expect(second != first)
            #expect(try await get(first) == 401, "the old secret stops at once")
            #expect(try await get(second) == 404)
            #expect(
                try await edge.request("POST", "/v1/hubs/keyed/keys/Devices/rotate?which=tertiary", as: "admin").status
                    == 400)
            #expect(try await edge.request("DELETE", "/v1/hubs/keyed/keys/Devices", as: "admin").status == 204)
            #expect(try await get(second) == 401, "revoked")
            #expect(try await edge.request("DELETE", "/v1/hubs/keyed/keys/Devices", as: "admin").status == 404)
        }
    }

    @Test("credentials are set and deleted over HTTP, never read back; limits change field by field")
    func credentialsAndLimits() async throws {
        try await LiveStack.with(auth: .accounts, users: ["admin"]) { live in
            #expect(try await live.herald(["hubs", "grant", "default", "admin", "Manage"]).status == 0)
            let edge = live.edge
            #expect(try await edge.request("POST", "/v1/hubs", as: "admin", body: #"{"name":"web"}"#).status == 201)
            let vapid = P256.Signing.PrivateKey().pemRepresentation
            let body = try JSONSerialization.data(withJSONObject: [
                "vapidKey": vapid, "subject": "mailto:ops@example.com",
            ])
            let set = try await edge.request(
                "PUT", "/v1/hubs/web/credentials/browser", as: "admin", body: String(decoding: body, as: UTF8.self))
            #expect(set.status == 200, "\(set.text)")
            #expect(!set.text.contains("PRIVATE KEY"))
            let browser = try #require(
                (try Self.json(set)["platforms"] as? [[String: Any]])?.first { $0["platform"] as? String == "browser" })
            #expect(browser["source"] as? String == "hub", "\(browser)")
            let read = try await edge.request("GET", "/v1/hubs/web/credentials", as: "admin")
            #expect(read.status == 200 && read.text.contains(#""source":"hub""#) && !read.text.contains("PRIVATE KEY"))

            // Checked now: a key that is not one, an unknown setting (named as this API spells
            // them), a test double's address outside test-mode.
            let bad = try await edge.request(
                "PUT", "/v1/hubs/web/credentials/browser", as: "admin",
                body: #"{"vapidKey":"nope","subject":"mailto:ops@example.com"}"#)
            #expect(bad.status == 400, "\(bad.text)")
            let unknown = try await edge.request(
                "PUT", "/v1/hubs/web/credentials/apns", as: "admin", body: #"{"keyIdentifier":"x"}"#)
            #expect(unknown.status == 400 && unknown.text.contains("keyIdentifier") && unknown.text.contains("keyId"))
            let aimed = try await edge.request(
                "PUT", "/v1/hubs/web/credentials/fcm", as: "admin",
                body: #"{"serviceAccount":"{}","url":"http://10.0.0.1/"}"#)
            #expect(aimed.status == 400 && aimed.text.contains("test-mode"), "\(aimed.text)")
            #expect(
                try await edge.request("PUT", "/v1/hubs/web/credentials/sms", as: "admin", body: "{}").status == 400)

            let removed = try await edge.request("DELETE", "/v1/hubs/web/credentials/browser", as: "admin")
            #expect(removed.status == 200 && !removed.text.contains(#""source":"hub""#), "\(removed.text)")

            // Limits: the fields given change, the others stay; out of range is 400 and changes nothing.
            var patched = try await edge.request(
                "PATCH", "/v1/hubs/web/limits", as: "admin", body: #"{"pushesPerDay":10,"requestsPerSecond":50}"#)
            #expect(patched.status == 200, "\(patched.text)")
            patched = try await edge.request("PATCH", "/v1/hubs/web/limits", as: "admin", body: #"{"weight":4}"#)
            let limits = try Self.json(patched)
            #expect(
                limits["pushesPerDay"] as? Int == 10 && limits["requestsPerSecond"] as? Int == 50
                    && limits["weight"] as? Int == 4, "\(limits)")
            #expect(
                try await edge.request("PATCH", "/v1/hubs/web/limits", as: "admin", body: #"{"weight":101}"#).status
                    == 400)
            #expect(
                try await edge.request("PATCH", "/v1/hubs/web/limits", as: "admin", body: #"{"pushesPerDay":-1}"#)
                    .status == 400)
            let now = try Self.json(try await edge.request("GET", "/v1/hubs/web/limits", as: "admin"))
            #expect(now["weight"] as? Int == 4 && now["pushesPerDay"] as? Int == 10, "\(now)")
            // The CLI reads the same.
            let shown = try await live.herald(["hubs", "limits", "web"])
            #expect(shown.output.contains("weight 4") && shown.output.contains("pushes per day 10"), "\(shown.output)")
        }
    }

    @Test(
        "a Python script provisions a hub, its keys and APNs credentials only over HTTP and sends through it with the PyPI NH client"
    )
    func provisionedFromPython() async throws {
        let python = try #require(which("python3"), "python3 is required (scripts/test.sh installs it)")
        try await StackFixture.withProviders(edge: ["--test-mode", "true"]) { fixture, live in
            #expect(try await live.herald(["hubs", "grant", "default", "ops", "Manage"]).status == 0)
            let token = apnsToken(1500)
            let result = try await runProgram(
                python,
                [
                    packageRoot.appendingPathComponent("Tests/python/nh_provision_check.py").path,
                    live.edge.base.absoluteString, "ops:ops", "\(fixture.folder)/apns.p8", ProviderFixture.keyID,
                    ProviderFixture.teamID, ProviderFixture.topic, fixture.double.url, token,
                ])
            try #require(result.status == 0, "nh_provision_check.py failed: \(result.error)")
            let out = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any])
            let created = try #require(out["created"] as? [String: Any])
            #expect(
                created["location"] as? String == "/v1/hubs/provisioned" && created["secret_shown"] as? Bool == true)
            #expect(out["secret_read_back"] as? Bool == false && out["credentials_leak"] as? Bool == false)
            #expect(out["apns_source"] as? String == "hub")
            let limits = try #require(out["limits"] as? [String: Any])
            #expect(limits["pushesThisMonth"] as? Int == 1 && limits["pushesPerMonth"] as? Int == 100, "\(limits)")
            // The push went to the double with the credentials set over HTTP (its topic and key).
            let pushes = try await fixture.double.waitFor(1) { $0.path == "/3/device/\(token)" }
            #expect(
                pushes.first?.header("apns-topic") == ProviderFixture.topic, "\(fixture.double.requests.map(\.path))")
        }
    }
}
