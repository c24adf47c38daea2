import ArgumentParser
import Foundation
import HeraldStack

#if canImport(Glibc)
    import Glibc
#endif

/// `herald-bench peers`: Herald next to what a team would deploy instead, each side as published,
/// on this machine, alternating round by round so both see the same load:
/// - registration upserts: Herald's `PUT api/register/{id}` (``EdgeScenario``) against
///   django-push-notifications' device API (its DRF viewset under gunicorn, unauthenticated: its
///   cheapest form), same wrk settings, one device upserted over and over on both sides;
/// - APNs sends: Herald's fan-out through its APNs sender (``APNsFanoutScenario``) against aioapns
///   (the asyncio client django-push-notifications uses, 10 connections), both to the same APNs
///   double, which checks every provider token and answers with the `apns-id` aioapns matches on.
///
/// The Python side comes from PyPI, pinned in `scripts/peers/requirements.txt`, in a venv of its
/// own. Figures only: nothing is asserted.
struct PeersBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "peers",
        abstract: "Herald against django-push-notifications (registrations) and aioapns (APNs sends).")
    @OptionGroup var options: BenchOptions
    @Option(help: "Rounds; each runs Herald's side, then the peer's.")
    var rounds = 2
    @Option(help: "The Python side's files (requirements.txt, dpn_site.py, dpn_urls.py, aioapns_send.py).")
    var scripts = "scripts/peers"
    @Option(help: "The venv the Python side is installed into (made when missing).")
    var venv = ".build/peers-venv"
    @Option(
        help: """
            postgres://…: django-push-notifications also runs on PostgreSQL (schema dpn, emptied first), and \
            Herald's edge too. scripts/postgres.sh start DIR makes a throw-away server.
            """)
    var database: String?

    func run() async throws { try await execute() }

    func execute() async throws {
        let peers = try PeerSide(scripts: scripts, venv: venv)
        var report = Report()
        report.add(try await peers.registrations(options: options, rounds: rounds, database: database))
        report.add(try await peers.apnsSends(options: options, rounds: rounds))
        try options.show(report, scenarios: ["peers"])
    }
}

/// The Python projects, installed and driven.
struct PeerSide {
    var scripts: String
    var python: String
    var bin: String

    init(scripts: String, venv: String) throws {
        let scripts = URL(fileURLWithPath: scripts).standardizedFileURL.path
        guard FileManager.default.fileExists(atPath: scripts + "/requirements.txt") else {
            throw BenchError(
                "\(scripts)/requirements.txt is missing: run from the repository's root, or pass --scripts")
        }
        let venv = URL(fileURLWithPath: venv).standardizedFileURL.path
        if !FileManager.default.isExecutableFile(atPath: venv + "/bin/python") {
            guard let python3 = which("python3") else { throw BenchError("python3 is missing") }
            print("peers: making the venv \(venv)")
            _ = try runProcess(python3, ["-m", "venv", venv])
        }
        _ = try runProcess(
            venv + "/bin/python",
            ["-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", scripts + "/requirements.txt"])
        self.scripts = scripts
        self.python = venv + "/bin/python"
        self.bin = venv + "/bin"
    }

    // MARK: registrations

    /// One configuration of django-push-notifications.
    struct DjangoSetup {
        var name: String
        var workers: Int
        /// `sqlite:<file>` or a PostgreSQL URL.
        var database: String
    }

    func registrations(options: BenchOptions, rounds: Int, database: String?) async throws -> Report {
        guard let wrk = which("wrk") else {
            throw BenchError("wrk is missing: apt-get install -y wrk (scripts/setup.sh --bench does it)")
        }
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // gunicorn's documented rule of thumb for sync workers, and one worker (SQLite's best
        // when writes serialise anyway).
        let many = 2 * ProcessInfo.processInfo.activeProcessorCount + 1
        var setups = [
            DjangoSetup(name: "SQLite (WAL), 1 gunicorn worker", workers: 1, database: "sqlite:\(dir)/dpn.sqlite3"),
            DjangoSetup(
                name: "SQLite (WAL), \(many) gunicorn workers", workers: many, database: "sqlite:\(dir)/dpn.sqlite3"),
        ]
        if let database {
            setups.append(DjangoSetup(name: "PostgreSQL, \(many) gunicorn workers", workers: many, database: database))
        }
        let edge = EdgeScenario(options: options)
        let body = #"{"registration_id":"\#(String(repeating: "ab", count: 32))","name":"bench"}"#
        let script = dir + "/post.lua"
        try """
        wrk.method = "POST"
        wrk.body = '\(body)'
        wrk.headers["Content-Type"] = "application/json"

        """.write(toFile: script, atomically: true, encoding: .utf8)

        var herald: [String: [EdgeScenario.WrkRun]] = [:]
        var peer: [String: [EdgeScenario.WrkRun]] = [:]
        let heraldStores = [("SQLite", nil as String?)] + (database.map { [("PostgreSQL", $0)] } ?? [])
        for round in 1...rounds {
            for (name, url) in heraldStores {
                let run = try await EdgeScenario(options: options, database: url).putRun()
                herald[name, default: []].append(run)
                print("peers: round \(round), Herald on \(name): \(format(run.requestsPerSecond)) req/s")
            }
            for setup in setups {
                let run = try await django(setup, dir: dir) { url in
                    try edge.runWrk(wrk, url: url + "/device/apns/", script: script, dir: dir)
                }
                peer[setup.name, default: []].append(run)
                print(
                    "peers: round \(round), django-push-notifications, \(setup.name): \(format(run.requestsPerSecond)) req/s"
                )
            }
        }

        func best(_ runs: [String: [EdgeScenario.WrkRun]]) throws -> (String, EdgeScenario.WrkRun) {
            let tops = runs.compactMap { name, list in
                list.max { $0.requestsPerSecond < $1.requestsPerSecond }.map { (name, $0) }
            }
            guard let top = tops.max(by: { $0.1.requestsPerSecond < $1.1.requestsPerSecond }) else {
                throw BenchError("no wrk run gave figures")
            }
            return top
        }
        let (heraldName, heraldBest) = try best(herald)
        let (peerName, peerBest) = try best(peer)
        var report = Report()
        report.records.append(
            Record(
                "peers", "registration upserts, Herald (\(heraldName)): requests/s", unit: "req/s",
                value: heraldBest.requestsPerSecond,
                baseline: "django-push-notifications (\(peerName))", baselineValue: peerBest.requestsPerSecond,
                better: "higher", target: "≥ 10× the peer"))
        var lines = [
            "## peers: registration upserts, wrk -t2 -c\(edge.connections), \(options.wrkSeconds) s per run, \(rounds) rounds alternating",
            "",
            "Herald: `PUT api/register/{id}` through the edge (tutorial auth: Basic, user == password). django-push-notifications: `POST /device/apns/` with a known registration_id (UPDATE_ON_DUPLICATE_REG_ID), its DRF viewset with no authentication. One device upserted over and over on both sides.",
            "",
            "| side | store and workers | requests/s per round | p50 ms | p99 ms |",
            "|---|---|---|---:|---:|",
        ]
        for (side, runs) in [("Herald", herald), ("django-push-notifications", peer)] {
            for (name, list) in runs.sorted(by: { $0.key < $1.key }) {
                guard let top = list.max(by: { $0.requestsPerSecond < $1.requestsPerSecond }) else { continue }
                lines.append(
                    "| \(side) | \(name) | \(list.map { format($0.requestsPerSecond) }.joined(separator: ", ")) | \(format(top.p50Millis)) | \(format(top.p99Millis)) |"
                )
            }
        }
        lines.append("")
        lines.append(
            "Best against best: Herald \(format(heraldBest.requestsPerSecond)) req/s, django-push-notifications \(format(peerBest.requestsPerSecond)) req/s: \(String(format: "%.1f", heraldBest.requestsPerSecond / peerBest.requestsPerSecond))×; p50 \(format(heraldBest.p50Millis)) vs \(format(peerBest.p50Millis)) ms."
        )
        report.tables = [lines.joined(separator: "\n")]
        return report
    }

    /// django-push-notifications under gunicorn with `setup`, on a fresh database, for `body`.
    func django<T>(_ setup: DjangoSetup, dir: String, _ body: (String) throws -> T) async throws -> T {
        var environment = ProcessInfo.processInfo.environment
        environment["DJANGO_SETTINGS_MODULE"] = "dpn_site"
        environment["PYTHONPATH"] = scripts
        environment["DPN_DATABASE"] = setup.database
        if setup.database.hasPrefix("sqlite:") {
            let file = String(setup.database.dropFirst("sqlite:".count))
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: file + suffix) }
        } else {
            _ = try runProcess(
                "/usr/bin/psql",
                [try psqlURL(setup.database), "-qAtc", "DROP SCHEMA IF EXISTS dpn CASCADE; CREATE SCHEMA dpn"],
                quiet: true)
        }
        _ = try runProcess(bin + "/django-admin", ["migrate", "-v0"], environment: environment)
        let port = try Stack.freePort()
        let gunicorn = Process()
        // A child of this process starts with nearly every signal blocked (the mask of the thread
        // that spawns it: async main parks the main thread in dispatch_main, which blocks them, and
        // the pool's threads inherit it), and gunicorn would never see the SIGTERM that stops it.
        // Python clears the mask, then becomes gunicorn.
        gunicorn.executableURL = URL(fileURLWithPath: python)
        gunicorn.arguments = [
            "-c",
            "import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); os.execv(sys.argv[1], sys.argv[1:])",
            bin + "/gunicorn",
            "-w", String(setup.workers), "-b", "127.0.0.1:\(port)", "--access-logfile", "/dev/null",
            "--error-logfile", "\(dir)/gunicorn.log", "django.core.wsgi:get_wsgi_application()",
        ]
        gunicorn.environment = environment
        try gunicorn.run()
        defer {
            gunicorn.terminate()
            gunicorn.waitUntilExit()
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while !Stack.isListening(port) {
            guard gunicorn.isRunning, ContinuousClock.now < deadline else {
                throw BenchError("gunicorn did not start; see \(dir)/gunicorn.log")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        return try body("http://127.0.0.1:\(port)")
    }

    // MARK: APNs sends

    func apnsSends(options: BenchOptions, rounds: Int) async throws -> Report {
        let count = options.quick ? 500 : options.fanoutSize
        var herald: [(rate: Double, cpu: Double)] = []
        var peer: [(rate: Double, cpu: Double)] = []
        for round in 1...rounds {
            let fanout = try await APNsFanoutScenario(options: options).run()
            guard let rate = fanout.records.first(where: { $0.unit == "/s" })?.value,
                let cpu = fanout.records.first(where: { $0.unit == "µs" })?.value
            else { throw BenchError("the APNs fan-out gave no figures") }
            herald.append((rate, cpu))
            print("peers: round \(round), Herald's APNs fan-out: \(format(rate))/s, \(format(cpu)) µs CPU per push")
            let sent = try await aioapns(count: count)
            peer.append(sent)
            print("peers: round \(round), aioapns: \(format(sent.rate))/s, \(format(sent.cpu)) µs CPU per push")
        }
        guard let heraldBest = herald.max(by: { $0.rate < $1.rate }), let peerBest = peer.max(by: { $0.rate < $1.rate })
        else { throw BenchError("no round gave figures") }
        var report = Report()
        report.records.append(
            Record(
                "peers", "APNs sends, Herald (durable outbox, every result recorded): pushes/s", unit: "/s",
                value: heraldBest.rate, baseline: "aioapns, 10 connections", baselineValue: peerBest.rate,
                better: "higher", target: "≥ 10× the peer"))
        report.records.append(
            Record(
                "peers", "APNs sends, herald-dispatch CPU per push", unit: "µs", value: heraldBest.cpu,
                baseline: "aioapns' CPU per push", baselineValue: peerBest.cpu, better: "lower"))
        report.tables = [
            """
            ## peers: APNs sends to the same double (it checks every provider token), \(count) pushes per run, \(rounds) rounds alternating

            Herald: one send to \(count) registrations, from Send until the outcome is Completed (outbox committed, every answer recorded). aioapns 4.0: \(count) `send_notification` calls, 1,000 in flight, its pool of at most 10 connections, timed after a first push has connected.

            | side | pushes/s per round | CPU µs per push, per round |
            |---|---|---|
            | Herald (herald-dispatch) | \(herald.map { format($0.rate) }.joined(separator: ", ")) | \(herald.map { format($0.cpu) }.joined(separator: ", ")) |
            | aioapns (the Python process) | \(peer.map { format($0.rate) }.joined(separator: ", ")) | \(peer.map { format($0.cpu) }.joined(separator: ", ")) |

            Best against best: Herald \(String(format: "%.1f", heraldBest.rate / peerBest.rate))× the pushes per second of aioapns, at \(String(format: "%.2f", heraldBest.cpu / peerBest.cpu))× its CPU per push.
            """
        ]
        return report
    }

    /// aioapns sends `count` alerts to a fresh APNs double: pushes/s and its CPU µs per push.
    func aioapns(count: Int) async throws -> (rate: Double, cpu: Double) {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let double = try await APNsDoubleProcess.start(dir: dir)
        defer { double.stop() }
        guard let port = double.url.split(separator: ":").last.map(String.init) else {
            throw BenchError("the double's URL \(double.url) has no port")
        }
        let folder = dir + "/apns"
        let output = try runProcess(
            python,
            [
                scripts + "/aioapns_send.py", "--host", "127.0.0.1", "--port", port, "--ca", "\(folder)/ca.pem",
                "--key", "\(folder)/apns.p8", "--key-id", APNsDoubleProcess.keyID, "--team-id",
                APNsDoubleProcess.teamID, "--topic", APNsDoubleProcess.topic, "--count", String(count),
                "--connections", "10",
            ])
        guard let line = output.split(separator: "\n").last,
            let json = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
            let ok = json["ok"] as? Int, let seconds = json["seconds"] as? Double,
            let cpu = json["cpu_seconds"] as? Double
        else { throw BenchError("cannot read aioapns_send.py's output:\n\(output)") }
        // The double's own count: every push answered 200, the first (untimed) one included.
        let stats = try await double.waitFor(delivered: count + 1)
        guard ok == count, stats.delivered == count + 1, stats.refused == 0 else {
            throw BenchError(
                "aioapns: \(ok) of \(count) answered 200; the double answered \(stats.delivered) and refused \(stats.refused)"
            )
        }
        return (Double(count) / seconds, cpu * 1e6 / Double(count))
    }
}
