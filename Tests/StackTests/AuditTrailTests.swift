import Crypto
import Foundation
import GRDB
import HeraldModel
import HeraldService
import HeraldTestSupport
import StackTestSupport
import Testing

@testable import Edge

/// The audit trail: every route the rights table names an audit action for appends one record
/// (who, what, which hub, the client's address, the request id, the status), the command-line
/// tool's changes too, readable by scope with `GET /v1/audit` and `herald audit`, and
/// `herald audit verify` finds a record altered or taken out.
@Suite("the audit trail", .serialized, .timeLimit(.minutes(5)), .watchedForStalls)
struct AuditTrailTests {
    /// The records after `after`, read as the stack's admin.
    static func records(_ live: LiveStack, after: Int, query: String = "") async throws -> [[String: Any]] {
        let reply = try await live.edge.request("GET", "/v1/audit?after=\(after)\(query)", as: "admin")
        try #require(reply.status == 200, "\(reply.text)")
        return try #require(try reply.json()["records"] as? [[String: Any]], "\(reply.text)")
    }

    static func header(_ reply: EdgeClient.Reply, _ name: String) -> String? {
        reply.headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }

    @Test(
        "each audited route of the rights table appends one record with who, what, where, the request id and the status"
    )
    func everyAuditedRoute() async throws {
        try await LiveStack.with(auth: .accounts, users: ["admin", "tenant"]) { live in
            let edge = live.edge
            // The tool's own change is the first record.
            #expect(try await live.herald(["hubs", "grant", "default", "admin", "Manage"]).status == 0)
            let first = try await Self.records(live, after: 0)
            #expect(first.count == 1, "\(first)")
            #expect(first.first?["action"] as? String == "grant.set")
            #expect((first.first?["actor"] as? String)?.hasPrefix("cli:") == true, "\(first)")
            #expect(first.first?["target"] as? String == AuditChain.pseudonym(user: "admin"))
            var seq = try #require(first.last?["seq"] as? Int)

            let vapid = P256.Signing.PrivateKey().pemRepresentation
            let credentials = String(
                decoding: try JSONSerialization.data(withJSONObject: [
                    "vapidKey": vapid, "subject": "mailto:ops@example.com",
                ]), as: UTF8.self)
            let browser = ConsoleTests.Browser(live)
            let signedIn = try await browser.signIn("admin", EdgeClient.password(of: "admin", in: .accounts))
            try #require(signedIn.status == 303, "\(signedIn.text)")
            var csrf = ""
            var full = ""
            let root = NHFixture.root(live)

            /// One call of each audited route, in an order where each finds what it needs; the
            /// hub it changes and what of it the record names.
            typealias Call = () async throws -> (reply: EdgeClient.Reply, hub: String, target: String, actor: String)
            let admin = "user:admin"
            let calls: [(route: String, call: Call)] = [
                (
                    "POST /v1/hubs",
                    {
                        (
                            try await edge.request("POST", "/v1/hubs", as: "admin", body: #"{"name":"aud"}"#), "aud",
                            "", admin
                        )
                    }
                ),
                (
                    "PUT /v1/hubs/{hub}/keys/{key}",
                    {
                        (
                            try await edge.request(
                                "PUT", "/v1/hubs/aud/keys/ops", as: "admin", body: #"{"rights":["Send"]}"#), "aud",
                            "ops", admin
                        )
                    }
                ),
                (
                    "POST /v1/hubs/{hub}/keys/{key}/rotate",
                    {
                        (
                            try await edge.request("POST", "/v1/hubs/aud/keys/ops/rotate", as: "admin"), "aud", "ops",
                            admin
                        )
                    }
                ),
                (
                    "DELETE /v1/hubs/{hub}/keys/{key}",
                    {
                        (try await edge.request("DELETE", "/v1/hubs/aud/keys/ops", as: "admin"), "aud", "ops", admin)
                    }
                ),
                (
                    "PUT /v1/hubs/{hub}/credentials/{platform}",
                    {
                        (
                            try await edge.request(
                                "PUT", "/v1/hubs/aud/credentials/browser", as: "admin", body: credentials), "aud",
                            "browser", admin
                        )
                    }
                ),
                (
                    "DELETE /v1/hubs/{hub}/credentials/{platform}",
                    {
                        (
                            try await edge.request("DELETE", "/v1/hubs/aud/credentials/browser", as: "admin"), "aud",
                            "browser", admin
                        )
                    }
                ),
                (
                    "PATCH /v1/hubs/{hub}/limits",
                    {
                        (
                            try await edge.request(
                                "PATCH", "/v1/hubs/aud/limits", as: "admin", body: #"{"pushesPerDay":10}"#), "aud", "",
                            admin
                        )
                    }
                ),
                (
                    "DELETE /{hub}/users/{user}",
                    {
                        (full, _) = try await NHFixture.hub("aud", live, create: false)
                        let reply = try await edge.request(
                            "DELETE", "/aud/users/u1?api-version=2020-06",
                            authorization: NHFixture.token(sr: root, full))
                        return (reply, "aud", AuditChain.pseudonym(user: "u1"), "key:DefaultFullSharedAccessSignature")
                    }
                ),
                (
                    "POST /console/hubs",
                    {
                        csrf = try ConsoleTests.Browser.csrf(try await browser.get("/console/hubs"))
                        return (
                            try await browser.post("/console/hubs", ["name": "aud2", "_csrf": csrf]), "aud2", "", admin
                        )
                    }
                ),
                (
                    "POST /console/hubs/{hub}/credentials/{platform}",
                    {
                        let reply = try await browser.postMultipart(
                            "/console/hubs/aud/credentials/browser",
                            ["vapid-key": vapid, "subject": "mailto:ops@example.com", "_csrf": csrf])
                        return (reply, "aud", "browser", admin)
                    }
                ),
                (
                    "POST /console/hubs/{hub}/credentials/{platform}/delete",
                    {
                        (
                            try await browser.post("/console/hubs/aud/credentials/browser/delete", ["_csrf": csrf]),
                            "aud", "browser", admin
                        )
                    }
                ),
                (
                    "POST /console/hubs/{hub}/keys",
                    {
                        (
                            try await browser.post(
                                "/console/hubs/aud/keys", ["name": "k2", "listen": "on", "_csrf": csrf]), "aud", "k2",
                            admin
                        )
                    }
                ),
                (
                    "POST /console/hubs/{hub}/keys/{key}/rotate",
                    {
                        (
                            try await browser.post(
                                "/console/hubs/aud/keys/k2/rotate", ["which": "primary", "_csrf": csrf]), "aud", "k2",
                            admin
                        )
                    }
                ),
                (
                    "POST /console/hubs/{hub}/keys/{key}/revoke",
                    {
                        (
                            try await browser.post("/console/hubs/aud/keys/k2/revoke", ["_csrf": csrf]), "aud", "k2",
                            admin
                        )
                    }
                ),
                (
                    "POST /console/hubs/{hub}/installations/{id}/delete",
                    {
                        let installation =
                            #"{"installationId":"i1","platform":"apns","pushChannel":"\#(apnsToken(1))"}"#
                        let put = try await edge.request(
                            "PUT", "/aud/installations/i1?api-version=2020-06",
                            authorization: NHFixture.token(sr: root, full), body: installation)
                        try #require(put.status == 200, "\(put.text)")
                        return (
                            try await browser.post("/console/hubs/aud/installations/i1/delete", ["_csrf": csrf]), "aud",
                            "i1", admin
                        )
                    }
                ),
                (
                    "POST /console/hubs/{hub}/registrations/{id}/delete",
                    {
                        (
                            try await browser.post("/console/hubs/aud/registrations/4242/delete", ["_csrf": csrf]),
                            "aud", "4242", admin
                        )
                    }
                ),
                (
                    "POST /console/hubs/{hub}/delete",
                    {
                        (
                            try await browser.post("/console/hubs/aud2/delete", ["confirm": "aud2", "_csrf": csrf]),
                            "aud2", "", admin
                        )
                    }
                ),
                (
                    "DELETE /v1/hubs/{hub}",
                    { (try await edge.request("DELETE", "/v1/hubs/aud", as: "admin"), "aud", "", admin) }
                ),
            ]
            // Every audited row has its call here, and every call its row.
            let audited = RouteRights.table.filter { $0.audit != nil }
            #expect(
                Set(audited.map(\.route)) == Set(calls.map(\.route)), "audited rows and the calls of this test differ")
            #expect(audited.count == calls.count)

            var hubIDs: [String: String] = [:]
            for (route, call) in calls {
                let action = try #require(RouteRights.auditActions[route], "\(route)")
                let (reply, hub, target, actor) = try await call()
                #expect(
                    [200, 201, 204, 303].contains(reply.status), "\(route): \(reply.status) \(reply.text.prefix(300))")
                let appended = try await Self.records(live, after: seq)
                #expect(appended.count == 1, "\(route): \(appended)")
                guard let record = appended.last else { continue }
                seq = try #require(record["seq"] as? Int)
                #expect(record["action"] as? String == action, "\(route): \(record)")
                #expect(record["actor"] as? String == actor, "\(route): \(record)")
                #expect(record["hub"] as? String == hub, "\(route): \(record)")
                #expect(record["target"] as? String == target, "\(route): \(record)")
                #expect(record["status"] as? Int == reply.status, "\(route): \(record)")
                #expect(record["clientAddress"] as? String == "127.0.0.1", "\(route): \(record)")
                #expect(record["requestId"] as? String == Self.header(reply, "X-Request-Id"), "\(route): \(record)")
                let id = try #require(record["hubId"] as? String)
                #expect(!id.isEmpty, "\(route): \(record)")
                #expect(hubIDs[hub].map { $0 == id } ?? true, "\(route): the hub's id changed")
                hubIDs[hub] = id
            }

            // A refused change by a known caller is a record too; a stranger's is not.
            let refused = try await edge.request("PATCH", "/v1/hubs/default/limits", as: "tenant", body: "{}")
            #expect(refused.status == 403)
            let denied = try await Self.records(live, after: seq)
            #expect(denied.count == 1 && denied.first?["status"] as? Int == 403, "\(denied)")
            #expect(denied.first?["actor"] as? String == "user:tenant")
            seq = try #require(denied.last?["seq"] as? Int)
            let stranger = try await edge.request(
                "DELETE", "/v1/hubs/default", authorization: EdgeClient.basic("nobody", "wrong-password"))
            #expect(stranger.status == 401)
            #expect(try await Self.records(live, after: seq).isEmpty)

            // The whole trail verifies, and `herald audit` prints it.
            let verified = try await live.herald(["audit", "verify"])
            #expect(verified.status == 0, "\(verified.output)\(verified.error)")
            #expect(verified.output.contains("\(seq) record(s) checked; head \(seq):"), "\(verified.output)")
            let listed = try await live.herald(["audit", "--json"])
            #expect(listed.status == 0 && listed.output.split(separator: "\n").count == seq, "\(listed.output)")
        }
    }

    @Test("GET /v1/audit: the admin reads every record, a hub's manager that hub's records only, others nothing")
    func scopes() async throws {
        try await LiveStack.with(auth: .accounts, users: ["admin", "tenant"]) { live in
            let edge = live.edge
            #expect(try await live.herald(["hubs", "grant", "default", "admin", "Manage"]).status == 0)
            for hub in ["one", "two"] {
                let made = try await edge.request("POST", "/v1/hubs", as: "admin", body: #"{"name":"\#(hub)"}"#)
                #expect(made.status == 201, "\(made.text)")
                let key = try await edge.request(
                    "PUT", "/v1/hubs/\(hub)/keys/ops", as: "admin", body: #"{"rights":["Send"]}"#)
                #expect(key.status == 201, "\(key.text)")
            }
            #expect(try await live.herald(["hubs", "grant", "one", "tenant", "Manage"]).status == 0)
            let all = try await Self.records(live, after: 0)
            #expect(all.count == 6, "\(all)")

            let own = try await edge.request("GET", "/v1/audit?hub=one", as: "tenant")
            #expect(own.status == 200, "\(own.text)")
            let records = try #require(try own.json()["records"] as? [[String: Any]])
            #expect(records.map { $0["hub"] as? String } == ["one", "one", "one"], "\(records)")
            #expect(try await edge.request("GET", "/v1/audit?hub=two", as: "tenant").status == 403)
            #expect(try await edge.request("GET", "/v1/audit", as: "tenant").status == 403)
            #expect(try await edge.request("GET", "/v1/audit").status == 401)
            for bad in ["limit=0", "limit=1001", "after=-1", "after=x", "limit=99999999999999999999999"] {
                #expect(try await edge.request("GET", "/v1/audit?\(bad)", as: "admin").status == 400, "\(bad)")
            }
            // Pages: the cursor walks the whole trail.
            let page = try await edge.request("GET", "/v1/audit?limit=4", as: "admin")
            let body = try page.json()
            #expect((body["records"] as? [[String: Any]])?.count == 4)
            #expect(body["nextAfter"] as? Int == 4, "\(body)")
            let head = try #require(body["head"] as? [String: Any])
            #expect(head["seq"] as? Int == 6 && (head["hash"] as? String)?.count == 64, "\(head)")
        }
    }

    @Test("herald audit verify finds one altered record, and records taken out")
    func verifyFindsTampering() async throws {
        try await LiveStack.with(auth: .accounts, users: ["admin"], database: .sqlite) { live in
            #expect(try await live.herald(["hubs", "grant", "default", "admin", "Manage"]).status == 0)
            for name in ["a1", "a2", "a3", "a4"] {
                #expect(try await live.herald(["hubs", "add", name]).status == 0)
            }
            let clean = try await live.herald(["audit", "verify"])
            #expect(clean.status == 0, "\(clean.output)\(clean.error)")
            let head = try #require(
                clean.output.split(separator: "\n").last?.split(separator: " ").last.map(String.init), "\(clean.output)"
            )

            // One field of one record changed, beside the running service (WAL).
            let path = live.configuration.dataDirectory + "/auth.sqlite"
            let database = try DatabaseQueue(path: path)
            try await database.write { db in
                try db.execute(sql: "UPDATE audit SET actor = 'cli:nobody' WHERE seq = 3")
            }
            let altered = try await live.herald(["audit", "verify"])
            #expect(altered.status != 0)
            #expect(altered.output.contains("record 3: altered"), "\(altered.output)")
            #expect(!altered.output.contains("record 2") && !altered.output.contains("record 4"), "\(altered.output)")

            // A record taken out of the middle, and one off the end (found against the head kept).
            try await database.write { db in
                try db.execute(sql: "UPDATE audit SET actor = (SELECT actor FROM audit WHERE seq = 2) WHERE seq = 3")
                try db.execute(sql: "DELETE FROM audit WHERE seq IN (2, 5)")
            }
            let removed = try await live.herald(["audit", "verify", "--head", head])
            #expect(removed.status != 0)
            #expect(removed.output.contains("record 3: follows record 1: 1 record(s) missing"), "\(removed.output)")
            #expect(removed.output.contains("record 5 of the head given is not in the trail"), "\(removed.output)")
        }
    }
}
