import AsyncHTTPClient
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import HeraldTestSupport
import NIOCore
import StackTestSupport
import Synchronization
import Testing

/// Fault drills: `kill -9` of each service in turn under load, and a full disk.
@Suite("fault drills", .serialized, .timeLimit(.minutes(10)), .watchedForStalls)
struct FaultDrillTests {

    /// What one request of the drill's traffic came back as.
    enum Answer: Sendable {
        /// A status, the `Retry-After` header, and the notification id of an accepted send.
        case status(Int, retryAfter: String?, notification: String?)
        /// No HTTP answer at all: connection refused or reset (only when the edge itself is killed).
        case transport(String)
        /// No answer within the client's deadline (never allowed): the request's `X-Request-Id`,
        /// and when it was sent, to find it in the edge's log.
        case hang(requestID: String, sent: ContinuousClock.Instant)
    }

    /// The services the drill kills. The edge has no database, so its case is the same in both
    /// passes and runs once, in the SQLite one: on PostgreSQL this drill is the slowest suite of
    /// the pass (334 s of it in a fresh-clone run), and the edge's case added a fifth to it.
    static let drilled =
        ["auth", "registration", "payload", "dispatch"] + (LiveStack.defaultDatabase == .sqlite ? ["edge"] : [])

    @Test(
        "kill -9 during 500 sends and registrations: every request answered (2xx, or 503 with Retry-After), recovery within 10 s, no acknowledged send lost",
        arguments: Self.drilled)
    func killUnderLoad(_ service: String) async throws {
        try await LiveStack.with(runner: .processes, auth: .tutorial) { live in
            for index in 0..<StackFixture.audience { try await live.register("drill", handle: apnsToken(900 + index)) }
            let edge = live.edge
            let completed = DrillCounter()
            // 300 requests after the kill cover the restart (0.1 s) and the recovery many times over:
            // each case recovered within a second in fresh-clone CI, while the 700 it then sent took
            // a minute of the suite's 151 s, the PostgreSQL ProcessTests pass's critical path.
            let total = 500
            let killAt = 200

            let traffic = Task { [service] in
                try await withThrowingTaskGroup(of: [Answer].self) { group in
                    for lane in 0..<16 {
                        group.addTask {
                            var answers: [Answer] = []
                            for n in stride(from: lane, to: total, by: 16) {
                                answers.append(
                                    contentsOf: try await Self.operation(
                                        n, edge: edge, retryTransport: service == "edge"))
                                completed.value.add(1, ordering: .relaxed)
                            }
                            return answers
                        }
                    }
                    return try await group.reduce(into: [Answer]()) { $0 += $1 }
                }
            }

            // Kill once the traffic is well under way.
            let wait = ContinuousClock.now + .seconds(60)
            while completed.value.load(ordering: .relaxed) < killAt, ContinuousClock.now < wait {
                try await Task.sleep(for: .milliseconds(10))
            }
            let pid = try #require(try await live.stack.pid(of: service))
            let killedAt = ContinuousClock.now
            kill(pid, SIGKILL)
            // Recovery: the first request after the kill that needs the killed service succeeds.
            let recovered = try await Self.recover(service, edge: edge, since: killedAt)
            let answers = try await traffic.value
            print("fault drill \(service): recovered after \(recovered); \(Self.summary(answers))")
            #expect(recovered < .seconds(10), "herald-\(service) took \(recovered) to recover")
            #expect(try await live.stack.restartCount(of: service) == 1)

            var accepted: [String] = []
            for answer in answers {
                switch answer {
                case .status(let code, let retryAfter, let notification):
                    #expect([200, 202].contains(code) || (code == 503 && retryAfter != nil), "status \(code)")
                    if let notification { accepted.append(notification) }
                case .transport(let error):
                    #expect(service == "edge", "no HTTP answer: \(error)")
                case .hang(let requestID, let sent):
                    // What the stack logged of it tells a stall of this process from one of Herald.
                    let logged = live.logs().split(separator: "\n").filter { $0.contains(requestID) }
                    Issue.record(
                        """
                        \(requestID): no answer within 15 s; sent \(sent - killedAt) after the kill; \
                        the stack logged: \(logged.isEmpty ? "nothing" : logged.joined(separator: " | "))
                        """)
                }
            }
            #expect(accepted.count >= total / 3)
            // Every acknowledged send reaches its whole StackFixture.audience.
            try await Self.expectDelivered(accepted, edge: edge)
        }
    }

    /// One step of the traffic: a notify-users send, a secure send, or a registration (of a
    /// user outside the StackFixture.audience, so the StackFixture.audience stays fixed), in turn.
    static func operation(_ n: Int, edge: EdgeClient, retryTransport: Bool) async throws -> [Answer] {
        var answers: [Answer] = []
        let id = "drill-\(n)"
        let deadline = ContinuousClock.now + .seconds(15)
        while true {
            let answer: Answer
            switch n % 3 {
            case 0:
                answer = await request(
                    edge, "POST", "/api/notifications?pns=apns&to_tag=drill", body: "\"drill \(n)\"", id: id)
            case 1:
                answer = await request(
                    edge, "POST", "/v1/notifications?kind=secure&to_user=drill", body: "secret \(n)", id: id)
            default:
                let created = await request(edge, "POST", "/api/register?handle=x", user: "other", body: nil, id: id)
                guard case .status(200, _, _) = created, case .status(_, _, let registration?) = created else {
                    answer = created
                    break
                }
                answer = await request(
                    edge, "PUT", "/api/register/\(registration)", user: "other",
                    body: #"{"Platform":"fcm","Handle":"fcm-drill-\#(n)","Tags":[]}"#, id: id + "-put")
            }
            answers.append(answer)
            // A client whose connection the dying edge refused or reset tries again, as every client does.
            guard case .transport = answer, retryTransport, ContinuousClock.now < deadline else { return answers }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// One request as `user` (password = name, tutorial mode) with a 15 s deadline; the
    /// notification id of an accepted send (or the id `POST api/register` answered).
    static func request(
        _ edge: EdgeClient, _ method: String, _ path: String, user: String = "sender", body: String?, id: String? = nil
    ) async -> Answer {
        let sent = ContinuousClock.now
        do {
            let reply = try await edge.request(
                method, path, authorization: EdgeClient.basic(user), body: body,
                headers: id.map { [("X-Request-Id", $0)] } ?? [], timeout: .seconds(15))
            var notification: String?
            if let location = reply.header("Location"),
                let match = location.firstMatch(of: /notifications\/([^\/]+)\/outcome/)
            {
                notification = String(match.1)
            } else if method == "POST", path.hasPrefix("/api/register"), reply.status == 200 {
                notification = reply.text.trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            }
            return .status(reply.status, retryAfter: reply.header("Retry-After"), notification: notification)
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout {
            return .hang(requestID: id ?? "", sent: sent)
        } catch {
            return .transport("\(error)")
        }
    }

    /// Time from the kill until a request that needs `service` succeeds.
    static func recover(_ service: String, edge: EdgeClient, since killedAt: ContinuousClock.Instant) async throws
        -> Duration
    {
        let deadline = killedAt + .seconds(30)
        while ContinuousClock.now < deadline {
            let answer: Answer =
                switch service {
                case "payload":
                    await request(edge, "POST", "/v1/notifications?kind=secure&to_user=nobody", body: "probe")
                case "dispatch":
                    await request(edge, "POST", "/api/notifications?pns=apns&to_tag=nobody", body: "\"probe\"")
                default: await request(edge, "POST", "/api/register", user: "probe", body: nil)
                }
            if case .status(let code, _, _) = answer, (200..<300).contains(code) {
                return ContinuousClock.now - killedAt
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return ContinuousClock.now - killedAt
    }

    /// Polls each outcome until it is Completed with the whole StackFixture.audience delivered: 16 polls in
    /// flight, so reading 1,300 outcomes takes a second, not the 13 s one at a time took.
    static func expectDelivered(_ notifications: [String], edge: EdgeClient) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        var pending = notifications.filter { $0.hasPrefix("n-") }
        #expect(pending.count == notifications.count)
        var last: [String: String] = [:]
        while !pending.isEmpty, ContinuousClock.now < deadline {
            let polled = try await withThrowingTaskGroup(of: [(String, String, Int?)].self) { group in
                for lane in 0..<16 {
                    let ids = stride(from: lane, to: pending.count, by: 16).map { pending[$0] }
                    group.addTask { try await ids.asyncMap { try await Self.poll($0, edge: edge) } }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            var completed = Set<String>()
            for (id, text, success) in polled {
                last[id] = text
                guard let success else { continue }
                #expect(success == StackFixture.audience, "\(id): \(text)")
                completed.insert(id)
            }
            pending.removeAll { completed.contains($0) }
            if !pending.isEmpty { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(
            pending.isEmpty,
            "\(pending.count) acknowledged sends not completed, e.g. \(pending.first.flatMap { last[$0] } ?? "")")
    }

    /// One read of an outcome: its text, and the platforms' successes once it is Completed.
    static func poll(_ id: String, edge: EdgeClient) async throws -> (String, String, Int?) {
        let reply: EdgeClient.Reply
        do {
            reply = try await edge.request(
                "GET", "/v1/notifications/\(id)/outcome", authorization: EdgeClient.basic("sender"),
                timeout: .seconds(15))
        } catch {
            // This poll only observes. Twice in CI the edge logged its answer within
            // milliseconds and this process read it only after 15 s, while in-process RPC
            // load tests held the event loops this client then shared (see `testHTTPClient`):
            // the test process stalled, not Herald. And a
            // keep-alive connection idle since the traffic can be closed by the edge
            // (header-timeout, 30 s) just as the pool hands it to this poll, which then
            // gets remoteConnectionClosed, or NIO's "I/O on closed channel" when the close
            // lands while the request is being written: HTTP/1.1's race, not an error.
            // Poll again until the deadline; an outcome never seen still fails.
            return (id, "no answer read: \(error)", nil)
        }
        guard reply.status == 200,
            let json = try JSONSerialization.jsonObject(with: reply.body) as? [String: Any],
            json["state"] as? String == "Completed",
            let platforms = json["platforms"] as? [[String: Any]]
        else { return (id, reply.text, nil) }
        return (id, reply.text, platforms.reduce(0) { $0 + ($1["success"] as? Int ?? 0) })
    }

    static func summary(_ answers: [Answer]) -> String {
        var counts: [String: Int] = [:]
        for answer in answers {
            switch answer {
            case .status(let code, _, _): counts["\(code)", default: 0] += 1
            case .transport: counts["no answer", default: 0] += 1
            case .hang: counts["0", default: 0] += 1
            }
        }
        return counts.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")
    }
}

/// Requests the drill's traffic has finished, shared by its lanes.
final class DrillCounter: Sendable {
    let value = Atomic<Int>(0)
}

/// A full disk under the services' data folder (a small tmpfs): writes answer 507 with a clear
/// message, reads keep working, and once space returns everything works and no file is corrupt.
@Suite(
    "disk full drill", .serialized, .timeLimit(.minutes(5)), .enabled(if: getuid() == 0, "mounting a tmpfs needs root"),
    .watchedForStalls)
struct DiskFullTests {
    @Test("disk full: writes 507 with a message, reads keep working, nothing corrupt after space returns", .sqliteStack)
    func diskFull() async throws {
        try await LiveStack.withDirectory { directory in
            let data = directory + "/data"
            try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
            let mounted = try await runProgram("/bin/mount", ["-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", data])
            try #require(mounted.status == 0, "mount: \(mounted.error)")
            defer { _ = try? runProgramBlocking("/bin/umount", ["-l", data]) }

            try await LiveStack.with(runner: .processes, directory: directory, auth: .tutorial, database: .sqlite) {
                live in
                let edge = live.edge
                let token = apnsToken(990)
                try await live.register("alice", handle: token)
                // Stored before the disk fills: one already read, one not yet.
                let read = try #require(try await Self.secure(edge, "read before")["payloadId"] as? Int)
                #expect(try await edge.request("GET", "/api/notifications/\(read)", as: "alice").status == 200)
                let unread = try #require(try await Self.secure(edge, "unread before")["payloadId"] as? Int)
                let registrationID = try await edge.request("POST", "/api/register", as: "bob").text.trimmingCharacters(
                    in: CharacterSet(charactersIn: "\""))

                // Fill every byte that is left.
                let filler = data + "/filler"
                _ = try await runProgram("/bin/dd", ["if=/dev/zero", "of=\(filler)", "bs=64k"])
                let full = try await edge.upload(
                    "/v1/notifications?kind=secure&to_user=alice", as: "alice",
                    bytes: Data(String(repeating: "x", count: 200_000).utf8),
                    contentType: "text/plain")
                #expect(full.status == 507, "\(full.status) \(full.text)")
                #expect((try? full.json()["message"] as? String)??.contains("storage full") == true, "\(full.text)")
                #expect(full.header("Retry-After") != nil)
                let put = try await edge.request(
                    "PUT", "/api/register/\(registrationID)", as: "bob",
                    body:
                        #"{"Platform":"fcm","Handle":"fcm-disk-full-\#(String(repeating: "t", count: 3000))","Tags":["t\#(String(repeating: "a", count: 100))"]}"#
                )
                #expect([200, 507].contains(put.status), "\(put.status) \(put.text)")
                // Reads: content stored earlier, read or not; logins.
                let again = try await edge.request("GET", "/api/notifications/\(read)", as: "alice")
                #expect(again.status == 200 && again.text.contains("read before"), "\(again.status) \(again.text)")
                let first = try await edge.request("GET", "/api/notifications/\(unread)", as: "alice")
                #expect(first.status == 200 && first.text.contains("unread before"), "\(first.status) \(first.text)")
                #expect(try await edge.request("GET", "/healthz").status == 200)

                // Space returns: writes work again without a restart.
                try FileManager.default.removeItem(atPath: filler)
                let deadline = ContinuousClock.now + .seconds(10)
                var after = try await Self.secureReply(edge, "after")
                while after.status != 202, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(100))
                    after = try await Self.secureReply(edge, "after")
                }
                #expect(after.status == 202, "\(after.text)")
                let id = try #require(try after.json()["payloadId"] as? Int)
                #expect(try await edge.request("GET", "/api/notifications/\(id)", as: "alice").text.contains("after"))
                for service in ["auth", "registration", "payload", "dispatch"] {
                    #expect(try await live.stack.restartCount(of: service) == 0, "\(service) restarted")
                }
            }
            // Nothing corrupt: every database passes SQLite's integrity check.
            for name in ["auth", "registration", "payload", "dispatch"] {
                let db = try DatabaseQueue(path: "\(data)/\(name).sqlite")
                let check = try await db.read { try String.fetchAll($0, sql: "PRAGMA integrity_check") }
                #expect(check == ["ok"], "\(name): \(check)")
            }
        }
    }

    static func secureReply(_ edge: EdgeClient, _ text: String) async throws -> EdgeClient.Reply {
        try await edge.upload(
            "/v1/notifications?kind=secure&to_user=alice", as: "alice", bytes: Data(text.utf8),
            contentType: "text/plain")
    }

    static func secure(_ edge: EdgeClient, _ text: String) async throws -> [String: Any] {
        let reply = try await secureReply(edge, text)
        try #require(reply.status == 202, "\(reply.status) \(reply.text)")
        return try reply.json()
    }
}
