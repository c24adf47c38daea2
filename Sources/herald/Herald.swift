import ArgumentParser
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import Logging
import ServiceLifecycle

@main
struct Herald: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald",
        abstract: "Run and inspect a Herald push-notification stack.",
        subcommands: [
            Up.self, Users.self, Hubs.self, Tokens.self, Device.self, Inbox.self, OutcomeCommand.self, Backup.self,
            Restore.self, Keys.self, Audit.self,
        ]
    )
}

/// `herald up`: the whole stack in the foreground.
struct Up: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Start the five Herald services on this machine and supervise them until Ctrl-C.")

    @Option(
        name: .customLong("dir"), help: "Folder for sockets (run/), SQLite files (data/) and logs. (default: .herald)")
    var dirGiven: String?
    var dir: String { dirGiven ?? ".herald" }
    @Option(help: "Address the edge listens on.")
    var httpHost = "127.0.0.1"
    @Option(help: "Port the edge listens on (0 picks a free one).")
    var httpPort = 8080
    @Option(help: "accounts (users from `herald users add`) or tutorial (any user whose password is the user name).")
    var authMode = AuthMode.accounts
    @Option(help: "What POST api/notifications sends: secure or rich.")
    var profile = EdgeProfile.secure
    @Option(help: "Log level of every service.")
    var logLevel = "info"
    @Option(help: "What the services speak between themselves: lean or grpc (each serves both).")
    var rpcTransport = RPCTransport.lean
    @Flag(help: "Write each service's output to <dir>/logs/<service>.log instead of this terminal.")
    var logFiles = false
    @Option(help: "The image the rich profile sends (png, jpg, gif, webp); default: Herald's built-in PNG.")
    var richImage: String?
    @Option(help: "The sockets' folder; default: $HERALD_RUNTIME_DIR, else <dir>/run.")
    var runtimeDir: String?
    @Option(help: "The SQLite files' folder; default: $HERALD_DATA_DIR, else <dir>/data.")
    var dataDir: String?
    @Option(
        help: """
            postgres://user[:password]@host[:port]/db (or postgres://user@/db?host=/socket/folder): auth, payload, \
            registration and dispatch keep their data there, a schema each.
            """)
    var database: String?

    func run() async throws {
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        var configuration = StackConfiguration(directory: dir)
        // Flags win (--runtime-dir/--data-dir, then --dir's run/ and data/), then the environment,
        // then .herald's folders.
        if let path = folderSetting(
            flag: ("--runtime-dir", runtimeDir), dirGiven: dirGiven, variable: "HERALD_RUNTIME_DIR")?.path
        {
            configuration.runtimeDirectory = URL(fileURLWithPath: path).standardizedFileURL.path
        }
        if let path = folderSetting(flag: ("--data-dir", dataDir), dirGiven: dirGiven, variable: "HERALD_DATA_DIR")?
            .path
        {
            configuration.dataDirectory = URL(fileURLWithPath: path).standardizedFileURL.path
        }
        configuration.httpHost = httpHost
        configuration.httpPort = httpPort
        configuration.authMode = authMode
        configuration.profile = profile
        configuration.logLevel = logLevel
        configuration.rpcTransport = rpcTransport
        configuration.captureLogs = logFiles
        configuration.databaseURL = database
        if let richImage {
            configuration.extraArguments["edge", default: []] += [
                "--rich-image", URL(fileURLWithPath: richImage).standardizedFileURL.path,
            ]
        }
        let logger = Logger(label: "herald")
        let group = ServiceGroup(
            services: [StackService(stack: Stack(configuration: configuration, logger: logger))],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger)
        try await group.run()
    }
}

/// Runs a ``Stack`` until graceful shutdown.
struct StackService: Service {
    let stack: Stack

    func run() async throws {
        try await stack.start()
        let url = await stack.edgeURL
        // Unbuffered: whoever runs `herald up` (a person, a script, a test) waits for this line.
        FileHandle.standardOutput.write(
            Data("Herald is up: \(url)  (data in \(stack.configuration.directory); Ctrl-C stops)\n".utf8))
        try? await gracefulShutdown()
        await stack.stop()
    }
}

/// `herald inbox`: what the inbox provider recorded.
struct Inbox: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the pushes the inbox provider recorded instead of sending them.")

    @OptionGroup var stack: StackOptions
    @Option(help: "Only entries after this sequence number.")
    var after: Int64 = 0
    @Option(help: "At most this many entries (up to 1000).")
    var limit: Int32 = 100
    @Flag(help: "Print JSON (one array) instead of text.")
    var json = false

    func run() async throws {
        let entries = try await withService(.dispatch, stack) { client in
            try await DispatchServiceClient(client).listInbox(ListInboxRequest(afterSequence: after, limit: limit))
                .entries
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            let data = try encoder.encode(entries.map(InboxEntryJSON.init))
            print(String(decoding: data, as: UTF8.self))
        } else if entries.isEmpty {
            print("inbox is empty")
        } else {
            for entry in entries {
                let headers = entry.headers.map { "\($0.name): \($0.value)" }.joined(separator: ", ")
                print("#\(entry.sequence) \(entry.platform.name) \(entry.handle) [\(headers)]")
                print("    \(String(decoding: entry.payload, as: UTF8.self))")
            }
        }
    }
}

/// Runs `body` with a client of `service` in the stack at `dir` (its lean socket).
func withService<T: Sendable>(_ service: ServiceName, _ stack: StackOptions, _ body: (RPCClient) async throws -> T)
    async throws -> T
{
    let socket = stack.socket(service.rawValue)
    guard FileManager.default.fileExists(atPath: socket) else {
        throw ValidationError(
            "no \(service) socket at \(socket) (the folder comes from \(stack.runtime.from)): is the stack running? "
                + "Point the CLI at its sockets with --runtime-dir DIR or HERALD_RUNTIME_DIR, or --dir for a `herald up` folder."
        )
    }
    do {
        return try await RPCClient.with(socketPath: socket, timeout: .seconds(30), body)
    } catch let error as ServiceError {
        throw CLIError(message: "\(error.code): \(error.message)", code: error.code)
    }
}

/// A failure to print as one line, without a stack of Swift types.
struct CLIError: Error, CustomStringConvertible {
    var message: String
    /// The service's status, when a service refused.
    var code: StatusCode?
    var description: String { message }
}

// The stack's settings are parsed straight into the types `StackConfiguration` takes.
extension AuthMode: ExpressibleByArgument {}
extension EdgeProfile: ExpressibleByArgument {}
extension RPCTransport: ExpressibleByArgument {}
