import Foundation
import GRDB
import HeraldClient
import HeraldSQL
import HeraldService
import HeraldStack
import HeraldTestSupport
import Logging
import NIOPosix
import PostgresNIO
import StackTestSupport
import Synchronization
import Testing

/// `herald users erase` as an operator runs it, during other users' traffic, after a first erase
/// that died halfway (herald-registration killed with SIGKILL): needs the services as processes.
@Suite("erase a user's data after a run killed halfway", .serialized, .timeLimit(.minutes(5)), .watchedForStalls)
struct EraseAfterKillTests {
    /// The person to erase: a name that appears nowhere else, so that any cell containing it is theirs.
    static let erased = "zed.erase"

    @Test(
        "herald users erase during traffic, after a run that died halfway: no cell of any table holds the user's name, handles or registration ids; other users' devices, content and pushes are untouched"
    )
    func eraseUnderLoad() async throws {
        let z = Self.erased
        let prefix = TestDatabases.freshPrefix()
        try await LiveStack.with(
            runner: .processes, auth: .accounts, users: [z, "bob", "sender"], schemaPrefix: prefix
        ) { live in
            let edge = live.edge
            // What Herald holds about z: tutorial devices (with a token, a lockout, a grant),
            // NH installations with z's userId and a template, content both ways, pushes to z's
            // devices, and a scheduled send to z's tag.
            var handles: [String] = []
            var ids: [String] = []
            for n in 0..<30 {
                handles.append(apnsToken(5000 + n))
                ids.append(try await live.register(z, handle: handles.last!, tags: ["news"]))
            }
            let full = try await NHFixture.defaultHub(live)
            let sas = NHFixture.token(sr: NHFixture.root(live), full)
            for n in 0..<5 {
                handles.append(apnsToken(6000 + n))
                let body = """
                    {"installationId":"inst-\(n)-of-zed","platform":"apns","pushChannel":"\(handles.last!)",
                     "userId":"\(z)","tags":["news"],"templates":{"t":{"body":"{\\"aps\\":{\\"alert\\":\\"$(msg)\\"}}"}}}
                    """
                let put = try await edge.request(
                    "PUT", "/default/installations/inst-\(n)-of-zed", authorization: sas, body: body)
                try #require(put.status == 200, "\(put.text)")
            }
            #expect(try await edge.request("POST", "/v1/auth/token", as: z).status == 200)
            #expect(
                try await edge.request("POST", "/api/register", authorization: EdgeClient.basic(z, "wrong password"))
                    .status == 401)
            let bobHandles = (0..<5).map { apnsToken(7000 + $0) }
            for handle in bobHandles { try await live.register("bob", handle: handle, tags: ["news"]) }

            let toZ = try await edge.request(
                "POST", "/v1/notifications?kind=secure&to_user=\(z)", as: "sender", body: "secret for \(z)")
            #expect(toZ.status == 202, "\(toZ.text)")
            let fromZ = try await edge.request(
                "POST", "/v1/notifications?kind=secure&to_user=bob", as: z, body: "a secret bob keeps")
            #expect(fromZ.status == 202, "\(fromZ.text)")
            let notify = try await edge.request(
                "POST", "/api/notifications?pns=apns&to_tag=\(z)", as: "sender", body: "\"hello \(z)\"")
            #expect(notify.status == 200, "\(notify.text)")
            let template = try await NHFixture.post(
                live, "/default/messages", full, body: #"{"msg":"to every template"}"#,
                headers: [("ServiceBusNotification-Format", "template"), ("ServiceBusNotification-Tags", "news")])
            #expect(template.status == 201, "\(template.text)")
            let later = ISO8601DateFormatter().string(from: Date().addingTimeInterval(3600))
            let scheduled = try await NHFixture.post(
                live, "/default/schedulednotifications", full, body: #"{"aps":{"alert":"later"}}"#,
                headers: [
                    ("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "username:\(z)"),
                    ("ServiceBusNotification-ScheduleTime", later),
                ])
            #expect(scheduled.status == 201, "\(scheduled.text)")
            let scheduledID = try NHFixture.id(scheduled.header("Location"))
            // z's 30 registrations get the secure push and the notify-users one; the 5 installations the template.
            _ = try await live.waitForInbox(count: 30 * 2 + 5, timeout: .seconds(60)) { entry in
                handles.contains(entry.handle)
            }
            let bobBefore = try await live.waitForInbox(count: 5, timeout: .seconds(60)) {
                bobHandles.contains($0.handle)
            }
            let bobSecret = try #require(
                String(
                    decoding: bobBefore.first { String(decoding: $0.payload, as: UTF8.self).contains("secureId") }!
                        .payload, as: UTF8.self
                ).firstMatch(of: /"secureId":"(\d+)"/)?.1
            ).description

            // A first erase dies halfway: auth's and payload's parts done, dispatch's part of the
            // first page of devices done, and registration killed before it deleted the page.
            let configuration = live.configuration
            func rpc<T: Sendable>(_ service: String, _ body: (RPCClient) async throws -> T) async throws -> T {
                try await RPCClient.with(
                    socketPath: configuration.socketPath(service), transport: configuration.rpcTransport,
                    timeout: .testRPC, body)
            }
            _ = try await rpc("auth") { try await AuthServiceClient($0).eraseUser(EraseUserRequest(user: z)) }
            _ = try await rpc("payload") { try await PayloadServiceClient($0).eraseUser(EraseUserRequest(user: z)) }
            let firstPage = try await rpc("registration") {
                try await RegistrationServiceClient($0).listUserDevices(ListUserDevicesRequest(user: z, limit: 10))
                    .devices
            }
            #expect(firstPage.count == 10)
            _ = try await rpc("dispatch") {
                try await DispatchServiceClient($0).eraseDevices(EraseDevicesRequest(devices: firstPage))
            }
            kill(try #require(try await live.stack.pid(of: "registration")), SIGKILL)
            let back = ContinuousClock.now + .seconds(30)
            while ContinuousClock.now < back {
                if await HeraldProcess.checkHealth(
                    socketPath: configuration.socketPath("registration"), transport: configuration.rpcTransport)
                {
                    break
                }
                try await Task.sleep(for: .milliseconds(50))
            }

            // The real command, as an operator runs it, while other users' traffic goes on: four lanes
            // of sends to bob and registrations of his, well under way before the erase starts.
            let stop = DrillCounter()
            let completed = DrillCounter()
            let traffic = Task {
                try await withThrowingTaskGroup(of: [Int].self) { lanes in
                    for lane in 0..<4 {
                        lanes.addTask {
                            var statuses: [Int] = []
                            var n = lane
                            while stop.value.load(ordering: .relaxed) == 0 {
                                n += 4
                                if n % 2 == 0 {
                                    statuses.append(
                                        try await edge.request(
                                            "POST", "/api/notifications?pns=apns&to_tag=bob", as: "sender",
                                            body: "\"load \(n)\""
                                        ).status)
                                } else {
                                    try await live.register("bob", platform: "fcm", handle: "fcm-bob-load-\(n)")
                                    statuses.append(200)
                                }
                                completed.value.add(1, ordering: .relaxed)
                            }
                            return statuses
                        }
                    }
                    return try await lanes.reduce(into: [Int]()) { $0 += $1 }
                }
            }
            let warm = ContinuousClock.now + .seconds(60)
            while completed.value.load(ordering: .relaxed) < 40, ContinuousClock.now < warm {
                try await Task.sleep(for: .milliseconds(10))
            }
            let herald = live.configuration.binDirectory + "/herald"
            let run = try await runProgram(
                herald, ["users", "erase", z, "--json", "--runtime-dir", live.configuration.runtimeDirectory])
            stop.value.store(1, ordering: .relaxed)
            let statuses = try await traffic.value
            #expect(run.status == 0, "herald users erase: \(run.output) \(run.error)")
            let report = try JSONDecoder().decode(UserErasure.Report.self, from: Data(run.output.utf8))
            // 35 devices, and the installations' template rows unless their parent's delete took them.
            #expect(report.devicesRemoved >= 35, "\(run.output)")
            #expect(statuses.allSatisfy { $0 == 200 }, "\(Set(statuses))")
            print(
                "erase drill: \(run.output.trimmingCharacters(in: .whitespacesAndNewlines)); others sent and registered \(statuses.count) times, from 40 before it started"
            )

            // Every cell of every table of every service's database.
            var found: [String] = []
            let needles = [z] + handles + ids
            if LiveStack.defaultDatabase == .postgres {
                found = try await Self.postgresCells(prefix: prefix, containing: needles)
            } else {
                // A synchronous scan of every cell: on NIO's thread pool, not the cooperative one.
                let folder = live.configuration.dataDirectory
                found = try await NIOThreadPool.singleton.runIfActive {
                    try StackBackup.services.flatMap { service in
                        try Self.cells(in: "\(folder)/\(service).sqlite", containing: needles)
                    }
                }
            }
            #expect(found.isEmpty, "\(found.count) cells still hold the user's data, e.g. \(found.prefix(5))")

            // The account is gone and the scheduled send to z alone is cancelled.
            #expect(try await edge.request("POST", "/api/register", as: z).status == 401)
            let details = try await edge.request("GET", "/default/messages/\(scheduledID)", authorization: sas)
            #expect(details.text.contains("<State>Cancelled</State>"), "\(details.text)")
            // Bob's devices, pushes and the content z sent him are his still.
            let fetched = try await edge.request("GET", "/api/notifications/\(bobSecret)", as: "bob")
            #expect(fetched.status == 200, "\(fetched.text)")
            let bobAfter = try await live.inbox().filter { bobHandles.contains($0.handle) }
            #expect(bobAfter.count >= bobBefore.count)
            let reached = try await edge.request(
                "POST", "/api/notifications?pns=apns&to_tag=bob", as: "sender", body: "\"after the erase\"")
            #expect(reached.status == 200)
            let after = try await live.waitForInbox(count: 5, timeout: .seconds(30)) {
                bobHandles.contains($0.handle)
                    && String(decoding: $0.payload, as: UTF8.self).contains("after the erase")
            }
            #expect(after.count == 5)

            // Idempotent: a second run finds nothing left.
            let again = try await runProgram(
                herald, ["users", "erase", z, "--json", "--runtime-dir", live.configuration.runtimeDirectory])
            #expect(again.status == 0, "\(again.error)")
            let second = try JSONDecoder().decode(UserErasure.Report.self, from: Data(again.output.utf8))
            #expect(
                second.devicesRemoved == 0 && second.accountRows == 0 && second.contentRemoved == 0, "\(again.output)")
        }
    }

    /// Every row of every table in the four services' schemas (`<prefix>_<service>`) whose JSON form
    /// holds one of `needles`, as text or (bytea columns) as hex. PostgreSQL does the matching: the
    /// tables hold thousands of rows by now, and matching them here, on the cooperative pool, held
    /// it for over a second on one core.
    static func postgresCells(prefix: String, containing needles: [String]) async throws -> [String] {
        let hex = needles.map { Data($0.utf8).map { String(format: "%02x", $0) }.joined() }
        var found: [String] = []
        for service in Stack.postgresServices {
            let url = try #require(TestDatabases.freshPostgresURL(service: service, prefix: prefix))
            guard case .postgres(let location) = try DatabaseURL(url, service: service) else { continue }
            let db = try HeraldPostgres(location, logger: Logger(label: "erase-check"), maximumConnections: 1)
            let tables = try await db.rows(
                PostgresQuery(
                    unsafeSQL:
                        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = '\(location.schema)'"
                ))
            for table in try tables.map({ try $0.decode(String.self) }) {
                let matches = try await db.rows(
                    """
                    SELECT DISTINCT n.needle FROM
                        (SELECT row_to_json(t)::text AS cells FROM \(unescaped: "\"\(location.schema)\".\"\(table)\"") t) r
                        JOIN unnest(\(needles)::text[], \(hex)::text[]) AS n(needle, hex)
                        ON strpos(r.cells, n.needle) > 0 OR strpos(r.cells, n.hex) > 0
                    """)
                for needle in try matches.map({ try $0.decode(String.self) }) {
                    found.append("\(service) \(table): \(needle)")
                }
            }
        }
        return found
    }

    /// Every cell (table.column of a row) of the database at `path` whose text, or bytes read as
    /// UTF-8, contains one of `needles`.
    static func cells(in path: String, containing needles: [String]) throws -> [String] {
        var configuration = Configuration()
        configuration.readonly = true
        let db = try DatabaseQueue(path: path, configuration: configuration)
        defer { try? db.close() }
        return try db.read { db in
            var found: [String] = []
            let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
            for table in tables {
                let rows = try Row.fetchCursor(db, sql: "SELECT * FROM \"\(table)\"")
                while let row = try rows.next() {
                    for (column, value) in row {
                        let text: String
                        switch value.storage {
                        case .string(let string): text = string
                        case .blob(let data): text = String(decoding: data, as: UTF8.self)
                        default: continue
                        }
                        if let needle = needles.first(where: { text.contains($0) }) {
                            found.append(
                                "\(URL(fileURLWithPath: path).lastPathComponent) \(table).\(column): \(needle)")
                        }
                    }
                }
            }
            return found
        }
    }
}
