import ArgumentParser
import Foundation
import HeraldClient
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService

/// `herald audit`: the audit trail of management changes, and its check.
struct Audit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the audit trail of management changes, or check its hash chain.",
        discussion: """
            Every change to a hub, its keys, credentials or limits, to grants, and every user erase \
            appends a record (over /v1/hubs, the console, the NH API's user erase, or this tool): who, \
            what, which hub, when, the client's address, the request id and the status answered. Each \
            record holds the SHA-256 of the one before it; `herald audit verify` recomputes them all.
            """,
        subcommands: [List.self, Verify.self], defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the audit trail, oldest first.")
        @OptionGroup var stack: StackOptions
        @Option(help: "Only this hub's records.") var hub: String?
        @Option(help: "Only the records of this user: made by them, or naming them (by their pseudonym).")
        var user: String?
        @Option(help: "Only records after this seq.") var after: Int64 = 0
        @Option(help: "At most this many records (0: all).") var limit: Int64 = 0
        @Flag(help: "One JSON object per line, every field.") var json = false

        func run() async throws {
            var hubID = ""
            if let hub { hubID = try await Hubs.identity(hub, stack).id }
            var printed: Int64 = 0
            let pseudonym = user.map(AuditChain.pseudonym(user:))
            try await Audit.walk(stack, hubID: hubID, after: after) { record in
                if let user, record.actor != "user:\(user)", record.target != pseudonym { return true }
                guard limit == 0 || printed < limit else { return false }
                printed += 1
                print(json ? try Audit.jsonLine(record) : Audit.line(record))
                return true
            }
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Recompute every record's hash; exit 1 naming each record altered or missing.",
            discussion: """
                Prints the head (the last record's seq and hash). Keep it somewhere else: a later verify \
                that finds a head before it finds records taken off the end too (--head SEQ:HASH).
                """)
        @OptionGroup var stack: StackOptions
        @Option(help: "A head printed by an earlier verify, SEQ:HASH: the trail must still hold it.")
        var head: String?

        func run() async throws {
            var verifier = AuditChain.Verifier()
            var kept: AuditRecord?
            let expected = try head.map(Self.parseHead)
            try await Audit.walk(stack, hubID: "", after: 0) { record in
                verifier.check(record)
                if record.seq == expected?.seq { kept = record }
                return true
            }
            var problems = verifier.breaks.map(\.description)
            if let expected {
                if kept == nil {
                    problems.append("record \(expected.seq) of the head given is not in the trail (taken off the end?)")
                } else if kept?.hash != expected.hash {
                    problems.append("record \(expected.seq) does not hold the head's hash given")
                }
            }
            for problem in problems { print(problem) }
            print("\(verifier.checked) record(s) checked; head \(verifier.headSeq):\(verifier.headHash)")
            if !problems.isEmpty {
                throw CLIError(message: "the audit trail does not verify: \(problems.count) problem(s)")
            }
        }

        static func parseHead(_ text: String) throws -> (seq: Int64, hash: String) {
            let parts = text.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, let seq = Int64(parts[0]), seq > 0, parts[1].utf8.count == 64 else {
                throw ValidationError("--head is SEQ:HASH, as verify printed it")
            }
            return (seq, String(parts[1]))
        }
    }

    /// Every record after `after` (of hub `hubID`, or all), page by page, until `body` says stop.
    static func walk(
        _ stack: StackOptions, hubID: String, after: Int64, _ body: (AuditRecord) throws -> Bool
    ) async throws {
        try await withService(.auth, stack) { client in
            let auth = AuthServiceClient(client)
            var cursor = after
            while true {
                let page = try await auth.listAudit(
                    ListAuditRequest(scope: hubID.isEmpty ? .all : .hub, hubID: hubID, afterSeq: cursor, limit: 1000))
                for record in page.records where !(try body(record)) { return }
                guard page.nextAfterSeq > 0 else { return }
                cursor = page.nextAfterSeq
            }
        }
    }

    static func line(_ record: AuditRecord) -> String {
        let time = iso8601(unixMillis: record.atUnixMs, fractional: true)
        let hub = record.hub.isEmpty ? "-" : record.hub
        let target = record.target.isEmpty ? "" : " \(record.target)"
        let detail = record.detail.isEmpty ? "" : " (\(record.detail))"
        let client = record.clientAddress.isEmpty ? "-" : record.clientAddress
        return
            "\(record.seq)\t\(time)\t\(record.status)\t\(record.actor)\t\(record.action)\t\(hub)\(target)\(detail)\tfrom \(client)\trequest \(record.requestID)"
    }

    static func jsonLine(_ record: AuditRecord) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: try encoder.encode(AuditRecordJSON(record)), as: UTF8.self)
    }
}

/// The audit records of this tool's own changes: `body` runs, and its result (200, or the status
/// its failure stands for) is appended with the local user as the actor. A record that cannot be
/// appended fails the command after the change, saying so.
enum CLIAudit {
    static func record<T: Sendable>(
        _ stack: StackOptions, _ action: String, hub: String = "", hubID: String = "", target: String = "",
        detail: String = "", _ body: () async throws -> T
    ) async throws -> T {
        let result: Result<T, any Error>
        do {
            result = .success(try await body())
        } catch {
            result = .failure(error)
        }
        var status: Int32 = 200
        if case .failure(let error) = result { status = Self.status(error) }
        // A refusal the tool made itself (a bad argument) changed nothing and reached no service.
        if case .failure(let error) = result, error is ValidationError { throw error }
        let request = AppendAuditRequest(
            actor: "cli:\(NSUserName())", action: action, hub: hub, hubID: hubID, target: target,
            clientAddress: "local", requestID: newRequestID(), status: status, detail: detail)
        do {
            _ = try await withService(.auth, stack) { client in
                try await AuthServiceClient(client).appendAudit(request)
            }
        } catch {
            if case .failure(let failure) = result { throw failure }
            throw CLIError(message: "\(action) was made, but its audit record was not appended: \(error)")
        }
        return try result.get()
    }

    /// The HTTP status the edge would answer for `error`.
    static func status(_ error: any Error) -> Int32 {
        let code = (error as? CLIError)?.code ?? (error as? ServiceError)?.code
        switch code {
        case .invalidArgument, .outOfRange, .failedPrecondition: return 400
        case .unauthenticated: return 401
        case .permissionDenied: return 403
        case .notFound: return 404
        case .alreadyExists, .aborted: return 409
        case .resourceExhausted: return 429
        case .unavailable, .deadlineExceeded, .cancelled: return 503
        default: return 500
        }
    }
}
