import Edge
import EdgeTestSupport
// The `router` target: the edge's whole router in-process, every route with its middleware, over
// the fake service clients EdgeTests uses and a real herald-registration on in-memory SQLite (the
// NH registration and installation RPCs). An input is one HTTP request as text, as the seeds in
// Tests/FuzzCorpus/router are written (one per route, scripts/make_fuzz_seeds.py), and as
// EdgeTestSupport's FuzzHTTPRequest reads it:
//
//     METHOD /path?query
//     Name: value            (up to 64 header lines; cookies, credentials, content types)
//                            (an empty line)
//     body bytes
//
// The properties: nothing traps, and no request makes the edge answer 500 (an error no route
// expected, which EdgeErrorMiddleware hides behind a generic message). Every answer's body is
// written out, so streamed pages (the console, exports) run too.
import Foundation
import GRDB
import HTTPTypes
import HeraldSQL
import HeraldService
import Hummingbird
import Logging
import NIOCore
import NIOEmbedded
import RegistrationService

extension FuzzTarget {
    struct RouterHarness: Sendable {
        let responder: RouterResponder<EdgeRequestContext>
        let store: SQLRegistrationStore
        let logger: Logger
    }

    /// Built once: the router over fakes that grant every right (so inputs reach the handlers'
    /// parsers), in test mode so the test routes are served too.
    static let routerHarness: RouterHarness = blocking {
        do {
            let store = try await SQLRegistrationStore(
                db: SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration)))
            let router = try PermissiveRouter.make(registrations: RegistrationHandlers(store: store))
            return RouterHarness(
                responder: router.buildResponder(), store: store,
                logger: Logger(label: "herald-fuzz") { _ in SwiftLogNoOpLogHandler() })
        } catch {
            fatalError("fuzz harness: cannot build the router: \(error)")
        }
    }

    static func router(_ bytes: [UInt8]) {
        guard let (head, body) = FuzzHTTPRequest.parse(bytes) else { return }
        let harness = routerHarness
        let outcome: String? = blocking {
            let request = Request(head: head, body: RequestBody(buffer: ByteBuffer(bytes: body)))
            let channel = EmbeddedChannel()
            // Closed at the end: an open EmbeddedChannel and its pipeline hold each other.
            defer { _ = try? channel.finish() }
            let context = EdgeRequestContext(
                source: ApplicationRequestContextSource(channel: channel, logger: harness.logger))
            let answer: String?
            do {
                let response = try await harness.responder.respond(to: request, context: context)
                try await response.body.write(DiscardingBodyWriter())
                answer = response.status == .internalServerError ? "answered 500" : nil
            } catch let error as any HTTPResponseError {
                answer = error.status == .internalServerError ? "threw an HTTP 500: \(error)" : nil
            } catch {
                answer = "threw \(type(of: error)): \(error)"
            }
            // Each input starts from an empty registration store, so the corpus stays replayable.
            _ = try? await harness.store.deleteEverything()
            return answer
        }
        if let outcome { fatalError("\(head.method) \(head.path ?? ""): the edge \(outcome)") }
    }
}

/// Writes a response body nowhere (the fuzzer looks at statuses; the writing runs the streams).
struct DiscardingBodyWriter: ResponseBodyWriter {
    mutating func write(_ buffer: ByteBuffer) async throws {}
    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
