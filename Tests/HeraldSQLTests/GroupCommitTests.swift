import Foundation
import GRDB
import HeraldModel
import HeraldTestSupport
import Synchronization
import Testing

@testable import HeraldSQL

/// SQLiteDatabase.groupWrite over a real WAL database file: batching, per-write rollback, nothing answered early.
@Suite("group commit", .watchedForStalls)
struct GroupCommitTests {
    /// Counts the commits of a database.
    final class Commits: TransactionObserver, @unchecked Sendable {
        let count = Mutex(0)
        func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { true }
        func databaseDidChange(with event: DatabaseEvent) {}
        func databaseDidCommit(_ db: Database) { count.withLock { $0 += 1 } }
        func databaseDidRollback(_ db: Database) {}
    }

    /// Set once, from any thread.
    final class Flag: Sendable {
        private let value = Mutex(false)
        var isSet: Bool { value.withLock { $0 } }
        func set() { value.withLock { $0 = true } }
    }

    static func withPool(_ body: (DatabasePool, Commits) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "group-commit-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pool = try DatabasePool(path: "\(directory)/test.sqlite", configuration: HeraldDatabase.configuration)
        try await pool.write { db in try db.execute(sql: "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)") }
        let commits = Commits()
        pool.add(transactionObserver: commits, extent: .databaseLifetime)
        try await body(pool, commits)
    }

    @Test("writes that arrive while a batch is written commit together; one that throws is rolled back alone")
    func batches() async throws {
        try await Self.withPool { pool, commits in
            let group = SQLiteDatabase(pool)
            let others = 99
            let started = Flag()
            try await withThrowingTaskGroup(of: (Int, Result<Int, any Error>).self) { tasks in
                // The first write holds its batch until the 99 others wait for the next.
                tasks.addTask {
                    let first = try await group.groupWrite { session in
                        try await session.execute("INSERT INTO t VALUES (0, 'first')")
                        started.set()
                        let deadline = ContinuousClock.now + .seconds(30)
                        while group.pendingGroupWrites < others, ContinuousClock.now < deadline {
                            try await Task.sleep(for: .milliseconds(1))
                        }
                        return 0
                    }
                    return (0, .success(first))
                }
                let deadline = ContinuousClock.now + .seconds(30)
                while !started.isSet, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
                for k in 1...others {
                    tasks.addTask {
                        do {
                            return (
                                k,
                                .success(
                                    try await group.groupWrite { session in
                                        try await session.execute("INSERT INTO t VALUES (\(k), 'v')")
                                        // Write 50 fails after its insert: the insert must not survive.
                                        if k == 50 { throw ServiceError.invalidArgument("fifty") }
                                        return k
                                    })
                            )
                        } catch {
                            return (k, .failure(error))
                        }
                    }
                }
                for try await (k, result) in tasks {
                    switch result {
                    case .success(let value): #expect(value == k && k != 50)
                    case .failure(let error): #expect(k == 50 && (error as? ServiceError)?.message == "fifty")
                    }
                }
            }
            #expect(commits.count.withLock { $0 } == 2)
            let rows = try await pool.read { db in try Int.fetchAll(db, sql: "SELECT k FROM t ORDER BY k") }
            #expect(rows == Array(0...others).filter { $0 != 50 })
        }
    }

    @Test("a batch that cannot commit fails every write in it, and none is kept")
    func commitFails() async throws {
        try await Self.withPool { pool, _ in
            let group = SQLiteDatabase(pool)
            // A deferred foreign-key violation is only found at COMMIT.
            try await pool.write { db in
                try db.execute(
                    sql: """
                        CREATE TABLE parent (id INTEGER PRIMARY KEY);
                        CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);
                        """)
            }
            await #expect(throws: (any Error).self) {
                try await group.groupWrite { session in try await session.execute("INSERT INTO child VALUES (1, 42)") }
            }
            let children = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM child") }
            #expect(children == 0)
            // The next batch works.
            try await group.groupWrite { session in try await session.execute("INSERT INTO t VALUES (7, 'after')") }
            #expect(try await pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM t") } == 1)
        }
    }
}
