import ArgumentParser
import Foundation
import HeraldClient
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack

#if canImport(Glibc)
    import Glibc
#endif

/// `herald users`: accounts of herald-auth's `accounts` mode, through its RPCs.
struct Users: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage the accounts of a running stack (auth-mode accounts).",
        subcommands: [Add.self, Passwd.self, Delete.self, Erase.self, Export.self, List.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Create a user. Prompts for the password, or reads one line from standard input when it is not a terminal."
        )
        @OptionGroup var stack: StackOptions
        @Argument(help: "User name: 1 to 64 characters of A-Z a-z 0-9 _ @ # . -")
        var user: String

        func run() async throws {
            let password = try readPassword(confirm: true)
            _ = try await withService(.auth, stack) { client in
                try await AuthServiceClient(client).createUser(CreateUserRequest(user: user, password: password))
            }
            print("user \(user) created")
        }
    }

    struct Passwd: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change a user's password (revokes their tokens).")
        @OptionGroup var stack: StackOptions
        @Argument var user: String

        func run() async throws {
            let password = try readPassword(confirm: true)
            _ = try await withService(.auth, stack) { client in
                try await AuthServiceClient(client).setPassword(SetPasswordRequest(user: user, password: password))
            }
            print("password of \(user) changed; their tokens are revoked")
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a user and their tokens.")
        @OptionGroup var stack: StackOptions
        @Argument var user: String

        func run() async throws {
            _ = try await CLIAudit.record(stack, "user.delete", target: AuditChain.pseudonym(user: user)) {
                try await withService(.auth, stack) { client in
                    try await AuthServiceClient(client).deleteUser(DeleteUserRequest(user: user))
                }
            }
            print("user \(user) deleted")
        }
    }

    struct Erase: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Erase everything Herald holds about a person, across every service.",
            discussion: """
                Without --hub: the account and its tokens, its registrations and installations (owned, \
                with its userId, or tagged username:NAME or $UserId:{NAME}) in every hub, content addressed \
                to it, its inbox entries; its handles are blanked in delivery records (counts kept) and \
                its name in sends; scheduled sends to it alone are cancelled. Content it sent to others \
                stays theirs, sender blanked. With --hub: that hub's devices and sends whose userId is NAME.
                Idempotent: run it again after a crash and it finishes the job.
                """)
        @OptionGroup var stack: StackOptions
        @Option(help: "Only this hub's devices and sends with this userId; the account is kept.")
        var hub: String?
        @Flag(help: "Print the counts as JSON.") var json = false
        @Argument var user: String

        func run() async throws {
            var identity: (name: String, id: String)?
            if let hub { identity = try await Hubs.identity(hub, stack) }
            let hubID = identity?.id
            let report = try await CLIAudit.record(
                stack, "user.erase", hub: identity?.name ?? "", hubID: hubID ?? "",
                target: AuditChain.pseudonym(user: user)
            ) {
                try await withEveryService(stack) { auth, registration, payload, dispatch in
                    try await UserErasure.run(
                        user: user, hub: hubID, auth: auth, registration: registration, payload: payload,
                        dispatch: dispatch)
                }
            }
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                print(String(decoding: try encoder.encode(report), as: UTF8.self))
                return
            }
            print(
                """
                \(user) erased\(hub.map { " on hub \($0)" } ?? ""): \(report.accountRows) account and token row(s), \
                \(report.devicesRemoved) device(s), \(report.contentRemoved) stored content(s) \
                (\(report.contentRedacted) sent to others kept, sender blanked), \(report.deliveryRowsRemoved) inbox and \
                delivery row(s) removed and \(report.deliveryRowsRedacted) redacted, \(report.sendRowsRemoved) send row(s) \
                cancelled or emptied and \(report.sendRowsRedacted) redacted
                """)
        }
    }

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write one JSON document of everything Herald holds about a person, from every service.",
            discussion: """
                Without --hub: the account (never a password hash or token), its grants, its devices \
                in every hub, content addressed to it (with the content) or sent by it (without), and \
                the sends it made or that were addressed to it. With --hub: that hub's devices and \
                sends whose userId is NAME. Written page by page, in bounded memory.
                """)
        @OptionGroup var stack: StackOptions
        @Option(help: "Only this hub's devices and sends with this userId.")
        var hub: String?
        @Option(help: "The file to write (default: standard output).")
        var out: String?
        @Option(help: "Items each service hands over per call (1 to 1,000): the memory an export takes.")
        var pageSize: Int32 = 500
        @Argument var user: String

        func validate() throws {
            guard (1...1000).contains(pageSize) else { throw ValidationError("--page-size must be 1 to 1,000") }
        }

        func run() async throws {
            var hubID: String?
            if let hub { hubID = try await Hubs.identity(hub, stack).id }
            let file: FileHandle
            if let out {
                guard FileManager.default.createFile(atPath: out, contents: nil) else {
                    throw CLIError(message: "cannot create \(out)")
                }
                file = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
            } else {
                file = FileHandle.standardOutput
            }
            // Items are small: written in 64 KiB blocks, not one system call each.
            var buffer: [UInt8] = []
            buffer.reserveCapacity(1 << 16)
            let counts = try await withEveryService(stack) { auth, registration, payload, dispatch in
                try await UserExport.run(
                    user: user, hub: hubID, auth: auth, registration: registration, payload: payload,
                    dispatch: dispatch,
                    pageSize: pageSize
                ) { bytes in
                    buffer += bytes
                    if buffer.count >= 1 << 16 {
                        try file.write(contentsOf: buffer)
                        buffer.removeAll(keepingCapacity: true)
                    }
                }
            }
            try file.write(contentsOf: buffer)
            if let out {
                try file.close()
                printError(
                    """
                    \(user): \(counts.devices) device(s), \(counts.deliveries) delivery record(s), \
                    \(counts.inbox) inbox entr(ies), \(counts.content) content(s), \(counts.sends) send(s) \
                    written to \(out)
                    """)
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the users.")
        @OptionGroup var stack: StackOptions

        func run() async throws {
            let users = try await withService(.auth, stack) { client in
                try await AuthServiceClient(client).listUsers(ListUsersRequest()).users
            }
            if users.isEmpty { print("no users; add one with: herald users add <name>") }
            let format = ISO8601DateFormatter()
            for user in users {
                let created = format.string(from: Date(timeIntervalSince1970: Double(user.createdAtUnixMs) / 1000))
                print("\(user.name)\tcreated \(created)")
            }
        }
    }
}

/// `herald tokens revoke`: ends every bearer token of a user.
struct Tokens: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Manage bearer tokens.", subcommands: [Revoke.self])

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke every live token of a user.")
        @OptionGroup var stack: StackOptions
        @Argument var user: String

        func run() async throws {
            let revoked = try await withService(.auth, stack) { client in
                try await AuthServiceClient(client).revokeUserTokens(RevokeUserTokensRequest(user: user)).revoked
            }
            print("revoked \(revoked) token(s) of \(user)")
        }
    }
}

/// Options every command that talks to a running stack shares.
struct StackOptions: ParsableArguments {
    @Option(help: "The stack's folder (as given to herald up). (default: .herald)")
    var dir: String?
    @Option(
        help:
            "The folder of the services' sockets, when not <dir>/run (e.g. /run/herald in a container); default: $HERALD_RUNTIME_DIR."
    )
    var runtimeDir: String?

    /// The stack's folder: `--dir`, else `.herald`.
    var folder: String { dir ?? ".herald" }

    /// The sockets' folder and the setting it came from. Flags win: `--runtime-dir`, then `--dir`'s
    /// `run/`; then `HERALD_RUNTIME_DIR` (as the services read it, so `docker-compose exec edge
    /// herald …` needs no flag); then `.herald/run`.
    var runtime: (path: String, from: String) {
        folderSetting(flag: ("--runtime-dir", runtimeDir), dirGiven: dir, variable: "HERALD_RUNTIME_DIR")
            ?? (
                StackConfiguration(directory: folder).runtimeDirectory,
                dir.map { "--dir \($0)" } ?? "the default folder .herald"
            )
    }

    /// The lean socket of `service`.
    func socket(_ service: String) -> String { "\(runtime.path)/\(service).sock" }
}

/// A folder setting of the CLI and where it came from: its own flag, else (unless `--dir` was given,
/// which then wins with its own sub-folder) the environment variable the services read. Nil: the
/// folder under `--dir` or `.herald`.
func folderSetting(flag: (name: String, value: String?), dirGiven: String?, variable: String) -> (
    path: String, from: String
)? {
    if let value = flag.value { return (value, flag.name) }
    guard dirGiven == nil, let value = ProcessInfo.processInfo.environment[variable], !value.isEmpty else { return nil }
    return (value, variable)
}

/// A password from the terminal (echo off, asked twice when `confirm`), or one line of standard
/// input when it is not a terminal (scripts: `echo "$PW" | herald users add alice`).
func readPassword(prompt: String = "Password: ", confirm: Bool = false) throws -> String {
    guard isatty(STDIN_FILENO) == 1 else {
        guard let line = readLine(strippingNewline: true), !line.isEmpty else {
            throw ValidationError("no password on standard input")
        }
        return line
    }
    func ask(_ prompt: String) -> String {
        FileHandle.standardError.write(Data(prompt.utf8))
        var saved = termios()
        tcgetattr(STDIN_FILENO, &saved)
        var silent = saved
        silent.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &silent)
        defer {
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
            FileHandle.standardError.write(Data("\n".utf8))
        }
        return readLine(strippingNewline: true) ?? ""
    }
    let password = ask(prompt)
    guard !password.isEmpty else { throw ValidationError("empty password") }
    if confirm, ask("Again: ") != password { throw ValidationError("the passwords differ") }
    return password
}

/// `body` with a client of each of the four services (an erase or an export calls them all).
func withEveryService<T: Sendable>(
    _ stack: StackOptions,
    _ body: (AuthServiceClient, RegistrationServiceClient, PayloadServiceClient, DispatchServiceClient) async throws ->
        T
) async throws -> T {
    try await withService(.auth, stack) { auth in
        try await withService(.registration, stack) { registration in
            try await withService(.payload, stack) { payload in
                try await withService(.dispatch, stack) { dispatch in
                    try await body(
                        AuthServiceClient(auth), RegistrationServiceClient(registration), PayloadServiceClient(payload),
                        DispatchServiceClient(dispatch))
                }
            }
        }
    }
}
