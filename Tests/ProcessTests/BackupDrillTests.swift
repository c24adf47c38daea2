import Foundation
import GRDB
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Synchronization
import Testing

/// `herald backup` while the stack serves, `herald restore` into a fresh one.
///
/// SQLite files only: the pass that runs every stack on PostgreSQL skips it (there, backups are
/// pg_dump's; see scripts/test.sh).
@Suite(
    "backup and restore", .serialized, .timeLimit(.minutes(10)),
    .enabled(if: LiveStack.defaultDatabase == .sqlite, "backs up SQLite files"), .watchedForStalls)
struct BackupDrillTests {
    /// A write the stack acknowledged, and when.
    struct Ack: Sendable {
        enum Kind: Sendable {
            case send
            case registration(handle: String)
        }
        var kind: Kind
        var id: String
        var at: ContinuousClock.Instant
    }

    @Test(
        "a backup taken during 2,000 sends and registrations, restored into a fresh stack: every write acknowledged before it started is there, integrity ok, the tutorial sequence works"
    )
    func backupUnderLoad() async throws {
        try await LiveStack.withDirectory { folder in
            let backup = folder + "/backup"
            var acknowledged: [Ack] = []
            var backupStarted = ContinuousClock.now
            let herald = StackConfiguration(directory: "/tmp").binDirectory + "/herald"

            try await LiveStack.with(runner: .processes, auth: .tutorial, database: .sqlite) { live in
                for index in 0..<StackFixture.audience {
                    try await live.register("drill", handle: apnsToken(900 + index))
                }
                let edge = live.edge
                let completed = DrillCounter()
                let total = 2000
                let traffic = Task {
                    try await withThrowingTaskGroup(of: [Ack].self) { group in
                        for lane in 0..<16 {
                            group.addTask {
                                var acks: [Ack] = []
                                for n in stride(from: lane, to: total, by: 16) {
                                    if let ack = try await Self.operation(n, lane: lane, edge: edge) {
                                        acks.append(ack)
                                    }
                                    completed.value.add(1, ordering: .relaxed)
                                }
                                return acks
                            }
                        }
                        return try await group.reduce(into: [Ack]()) { $0 += $1 }
                    }
                }
                let wait = ContinuousClock.now + .seconds(60)
                while completed.value.load(ordering: .relaxed) < 300, ContinuousClock.now < wait {
                    try await Task.sleep(for: .milliseconds(10))
                }
                // The real command, as an operator runs it, while the traffic goes on.
                backupStarted = ContinuousClock.now
                let result = try await runProgram(
                    herald, ["backup", "--data-dir", live.configuration.dataDirectory, backup])
                #expect(result.status == 0, "herald backup: \(result.output) \(result.error)")
                let during = completed.value.load(ordering: .relaxed)
                acknowledged = try await traffic.value
                print(
                    "backup drill: backup started after \(acknowledged.filter { $0.at < backupStarted }.count) acknowledged writes, "
                        + "finished at \(during) requests of \(total); \(acknowledged.count) acknowledged in all")
            }
            let before = acknowledged.filter { $0.at < backupStarted }
            #expect(before.count >= 250)

            // Restore into a fresh folder with the real command, then read every database as a file.
            let fresh = folder + "/fresh"
            try FileManager.default.createDirectory(atPath: fresh, withIntermediateDirectories: true)
            let restored = try await runProgram(herald, ["restore", "--dir", fresh, backup])
            try #require(restored.status == 0, "herald restore: \(restored.output) \(restored.error)")
            for service in StackBackup.services {
                let db = try DatabaseQueue(path: "\(fresh)/data/\(service).sqlite")
                let integrity = try await db.read { try String.fetchAll($0, sql: "PRAGMA integrity_check") }
                #expect(integrity == ["ok"], "\(service)")
                try db.close()
            }
            let registrations = try DatabaseQueue(path: "\(fresh)/data/registration.sqlite")
            for ack in before {
                guard case .registration(let handle) = ack.kind else { continue }
                let stored = try await registrations.read {
                    try String.fetchOne($0, sql: "SELECT handle FROM registration WHERE id = ?", arguments: [ack.id])
                }
                #expect(stored == handle, "registration \(ack.id) acknowledged before the backup")
            }
            try registrations.close()

            try await LiveStack.with(runner: .processes, directory: fresh, auth: .tutorial) { live in
                // Every send acknowledged before the backup is known to the restored stack.
                var missing: [String] = []
                for ack in before {
                    guard case .send = ack.kind else { continue }
                    let outcome = try await live.edge.request(
                        "GET", "/v1/notifications/\(ack.id)/outcome", as: "sender")
                    if outcome.status != 200 { missing.append("\(ack.id): \(outcome.status)") }
                }
                #expect(
                    missing.isEmpty,
                    "\(missing.count) acknowledged sends missing after the restore, e.g. \(missing.prefix(3))")
                // The devices registered before the backup still receive, and the tutorial sequence works.
                let sent = try await live.edge.request(
                    "POST", "/api/notifications?pns=apns&to_tag=drill", as: "sender", body: "\"after restore\"")
                #expect(sent.status == 200, "\(sent.text)")
                let entries = try await live.waitForInbox(count: StackFixture.audience, timeout: .seconds(60)) {
                    String(decoding: $0.payload, as: UTF8.self).contains("after restore")
                }
                #expect(Set(entries.map(\.handle)) == Set((0..<StackFixture.audience).map { apnsToken(900 + $0) }))
                try await StackFixture.secureSequence(live)
            }

            // A second restore of the same backup into the now used folder keeps what was there aside.
            let again = try await runProgram(herald, ["restore", "--dir", fresh, backup])
            #expect(again.status == 0, "\(again.error)")
            #expect(again.output.contains("replaced-"), "\(again.output)")
        }
    }

    @Test(
        "restore refuses a running stack, a file that differs from its manifest, a database that is a link, and a backup a newer Herald made"
    )
    func restoreRefuses() async throws {
        try await LiveStack.withDirectory { folder in
            let backup = folder + "/backup"
            let herald = StackConfiguration(directory: "/tmp").binDirectory + "/herald"
            try await LiveStack.with(runner: .processes, auth: .tutorial, database: .sqlite) { live in
                try await live.register("alice", handle: apnsToken(1))
                let made = try await runProgram(herald, ["backup", "--dir", live.configuration.directory, backup])
                try #require(made.status == 0, "\(made.error)")
                let again = try await runProgram(herald, ["backup", "--dir", live.configuration.directory, backup])
                #expect(again.status != 0 && again.error.contains("not empty"), "\(again.error)")
                let running = try await runProgram(herald, ["restore", "--dir", live.configuration.directory, backup])
                #expect(running.status != 0 && running.error.contains("is running"), "\(running.error)")
            }
            let check = try await runProgram(herald, ["restore", "--check-only", backup])
            #expect(check.status == 0, "\(check.error)")

            // One byte changed in a copy: refused, nothing restored.
            let tampered = folder + "/tampered"
            try FileManager.default.copyItem(atPath: backup, toPath: tampered)
            let handle = try #require(FileHandle(forUpdatingAtPath: tampered + "/payload.sqlite"))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data([0]))
            try handle.close()
            let target = folder + "/target"
            try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
            let refused = try await runProgram(herald, ["restore", "--dir", target, tampered])
            #expect(
                refused.status != 0 && refused.error.contains("not the file the manifest describes"), "\(refused.error)"
            )
            #expect(!FileManager.default.fileExists(atPath: target + "/data/payload.sqlite"))

            // A database that is a link (to a copy whose size and hash match): refused, nothing
            // restored, no link left in the data folder.
            let linked = folder + "/linked"
            try FileManager.default.copyItem(atPath: backup, toPath: linked)
            try FileManager.default.moveItem(
                atPath: linked + "/registration.sqlite", toPath: linked + "/../registration-elsewhere.sqlite")
            try FileManager.default.createSymbolicLink(
                atPath: linked + "/registration.sqlite",
                withDestinationPath: linked + "/../registration-elsewhere.sqlite")
            let linkRefused = try await runProgram(herald, ["restore", "--dir", target, linked])
            #expect(linkRefused.status != 0 && linkRefused.error.contains("not a regular file"), "\(linkRefused.error)")
            #expect(
                (try? FileManager.default.destinationOfSymbolicLink(atPath: target + "/data/registration.sqlite"))
                    == nil)
            #expect(!FileManager.default.fileExists(atPath: target + "/data/registration.sqlite"))

            // A migration this Herald does not know, with a manifest that matches it: refused.
            let newer = folder + "/newer"
            try FileManager.default.copyItem(atPath: backup, toPath: newer)
            let db = try DatabaseQueue(path: newer + "/auth.sqlite")
            try await db.write {
                try $0.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v99-from-the-future')")
            }
            try db.close()
            var manifest = try JSONDecoder().decode(
                StackBackup.Manifest.self, from: try Data(contentsOf: URL(fileURLWithPath: newer + "/manifest.json")))
            let index = try #require(manifest.databases.firstIndex { $0.service == "auth" })
            manifest.databases[index].migrations.append("v99-from-the-future")
            let (bytes, sha256) = try StackBackup.digest(newer + "/auth.sqlite")
            manifest.databases[index].bytes = bytes
            manifest.databases[index].sha256 = sha256
            try JSONEncoder().encode(manifest).write(to: URL(fileURLWithPath: newer + "/manifest.json"))
            let future = try await runProgram(herald, ["restore", "--dir", target, newer])
            #expect(future.status != 0 && future.error.contains("v99-from-the-future"), "\(future.error)")
            #expect(!FileManager.default.fileExists(atPath: target + "/data/auth.sqlite"))
        }
    }

    /// One step: a notify-users send, a secure send, or a registration of the lane's own user (so
    /// no other lane's POST can take its registration over), in turn. Nil when not acknowledged.
    static func operation(_ n: Int, lane: Int, edge: EdgeClient) async throws -> Ack? {
        switch n % 3 {
        case 0, 1:
            let path =
                n % 3 == 0 ? "/api/notifications?pns=apns&to_tag=drill" : "/v1/notifications?kind=secure&to_user=drill"
            let reply = try await edge.request(
                "POST", path, as: "sender", body: n % 3 == 0 ? "\"backup \(n)\"" : "secret \(n)")
            guard [200, 202].contains(reply.status), let location = reply.header("Location"),
                let id = location.firstMatch(of: /notifications\/([^\/]+)\/outcome/)?.1
            else { return nil }
            return Ack(kind: .send, id: String(id), at: .now)
        default:
            let user = "reg-\(lane)"
            let handle = "fcm-backup-\(n)"
            let created = try await edge.request("POST", "/api/register?handle=\(handle)", as: user)
            guard created.status == 200,
                let id = try JSONSerialization.jsonObject(with: created.body, options: .fragmentsAllowed) as? String
            else { return nil }
            let put = try await edge.request(
                "PUT", "/api/register/\(id)", as: user, body: #"{"Platform":"fcm","Handle":"\#(handle)","Tags":[]}"#)
            guard put.status == 200 else { return nil }
            return Ack(kind: .registration(handle: handle), id: id, at: .now)
        }
    }
}

/// On PostgreSQL a backup is PostgreSQL's own: `pg_dump` of the services' schemas, `pg_restore`
/// after a loss (docs/operations.md's recipe, run here as written).
@Suite(
    "backup and restore on PostgreSQL", .serialized, .timeLimit(.minutes(5)),
    .enabled(if: TestDatabases.postgresURL != nil, "needs HERALD_TEST_POSTGRES_URL"), .watchedForStalls)
struct PostgresBackupTests {
    /// The newest PostgreSQL's programs, as scripts/postgres.sh finds them.
    static func program(_ name: String) throws -> String {
        let root = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        let newest = try #require(versions.compactMap(Int.init).max(), "no PostgreSQL under \(root)")
        return "\(root)/\(newest)/bin/\(name)"
    }

    @Test(
        "pg_dump of the services' schemas while the stack serves, the schemas dropped, pg_restore: the stack finds its data again"
    )
    func dumpAndRestore() async throws {
        let url = try #require(TestDatabases.postgresURL)
        let prefix = TestDatabases.freshPrefix()
        try await LiveStack.withDirectory { folder in
            let dump = folder + "/herald.dump"
            var notification = ""
            try await LiveStack.with(runner: .processes, auth: .tutorial, database: .postgres, schemaPrefix: prefix) {
                live in
                try await live.register("alice", handle: apnsToken(7))
                let sent = try await live.edge.request(
                    "POST", "/v1/notifications?kind=secure&to_user=alice", as: "bob", body: "kept")
                #expect(sent.status == 202, "\(sent.text)")
                notification = try #require(try sent.json()["notificationId"] as? String)
                // Taken while the stack serves: pg_dump reads in one snapshot.
                let dumped = try await runProgram(
                    try Self.program("pg_dump"),
                    ["--format=custom", "--schema=\(prefix)_*", "--file=\(dump)", "--dbname=\(url)"])
                try #require(dumped.status == 0, "pg_dump: \(dumped.error)")
            }
            // The loss: every schema of the stack dropped.
            let schemas = Stack.postgresServices.map { "\(prefix)_\($0)" }
            let dropped = try await runProgram(
                try Self.program("psql"),
                [
                    "--dbname=\(url)", "-v", "ON_ERROR_STOP=1", "-c",
                    "DROP SCHEMA \(schemas.joined(separator: ", ")) CASCADE",
                ])
            try #require(dropped.status == 0, "psql: \(dropped.error)")
            let restored = try await runProgram(
                try Self.program("pg_restore"), ["--exit-on-error", "--dbname=\(url)", dump])
            try #require(restored.status == 0, "pg_restore: \(restored.error)")

            try await LiveStack.with(runner: .processes, auth: .tutorial, database: .postgres, schemaPrefix: prefix) {
                live in
                let outcome = try await live.edge.request("GET", "/v1/notifications/\(notification)/outcome", as: "bob")
                #expect(outcome.status == 200, "\(outcome.text)")
                let sent = try await live.edge.request(
                    "POST", "/api/notifications?pns=apns&to_tag=alice", as: "bob", body: "\"after restore\"")
                #expect(sent.status == 200, "\(sent.text)")
                _ = try await live.waitForInbox(timeout: .seconds(60)) {
                    $0.handle == apnsToken(7) && String(decoding: $0.payload, as: UTF8.self).contains("after restore")
                }
            }
        }
    }
}
