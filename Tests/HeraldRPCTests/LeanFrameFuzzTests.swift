import Foundation
import HeraldTestSupport
import NIOCore
import NIOEmbedded
import Testing

@testable import HeraldLeanTransport
@testable import HeraldRPC

/// Corpus-driven fuzzing of the lean protocol's decoders: valid frames, mutated frames and random
/// bytes must be parsed or refused with an error, never crash or hang, and whatever parses must
/// re-encode to exactly the bytes it came from.
///
/// Runs about 20,000 inputs by default; `HERALD_FUZZ_SECONDS=300 swift test --filter LeanFrameFuzz`
/// runs for that long instead.
@Suite("lean frame decoder fuzzing", .timeLimit(.minutes(10)), .watchedForStalls)
struct LeanFrameFuzzTests {
    static func corpus() throws -> [[UInt8]] {
        let request = try LeanRequest(
            timeoutMilliseconds: 5000, window: 256, method: "herald.v1.PayloadService/FetchPayload",
            metadata: [LeanMetadataEntry(key: "x-request-id", value: "abc")],
            message: ByteBuffer(bytes: [8, 7, 18, 3, 98, 111, 98])
        ).frame(callID: 7)
        let frames = [
            request,
            LeanFrame(.message, callID: 7, payload: ByteBuffer(bytes: [1, 2, 3])),
            LeanFrame.status(.end, callID: 7, code: .notFound, message: "gone"),
            LeanFrame.status(
                .end, callID: 7, code: .resourceExhausted, message: "later", metadata: ["retry-after": "3"]),
            LeanFrame(.cancel, callID: 9),
            LeanFrame.window(callID: 9, credits: 128),
            LeanFrame(.goaway, callID: 0),
            LeanFrame.status(.error, callID: 0, code: .invalidArgument, message: "bad"),
        ]
        return frames.map { Array($0.encoded().readableBytesView) } + [
            frames.flatMap { Array($0.encoded().readableBytesView) }
        ]
    }

    static func mutate(_ input: [UInt8], _ random: inout SeededGenerator) -> [UInt8] {
        var bytes = input
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            switch Int.random(in: 0..<6, using: &random) {
            case 0 where !bytes.isEmpty:  // flip a bit
                let i = Int.random(in: 0..<bytes.count, using: &random)
                bytes[i] ^= 1 << UInt8.random(in: 0..<8, using: &random)
            case 1 where !bytes.isEmpty:  // truncate
                bytes.removeLast(Int.random(in: 0...bytes.count, using: &random))
            case 2:  // insert random bytes
                let at = Int.random(in: 0...bytes.count, using: &random)
                bytes.insert(
                    contentsOf: (0..<Int.random(in: 1...16, using: &random)).map { _ in
                        UInt8.random(in: 0...255, using: &random)
                    }, at: at)
            case 3 where bytes.count >= 4:  // rewrite the length field with an edge value
                let value = [
                    0, 1, 5, 6, 7, UInt32.max, UInt32(LeanProtocol.defaultMaxFrameBytes),
                    UInt32(LeanProtocol.defaultMaxFrameBytes + 1),
                ]
                .randomElement(using: &random)!
                withUnsafeBytes(of: value.bigEndian) { bytes.replaceSubrange(0..<4, with: $0) }
            case 4 where bytes.count > 21:  // corrupt a short-string length inside a REQUEST head
                bytes[Int.random(in: 18...min(bytes.count - 1, 20), using: &random)] = UInt8.random(
                    in: 0...255, using: &random)
            default:  // random bytes
                bytes = (0..<Int.random(in: 0...64, using: &random)).map { _ in
                    UInt8.random(in: 0...255, using: &random)
                }
            }
        }
        return bytes
    }

    /// Parses everything in `bytes`; checks the round-trip property for each frame.
    static func check(_ bytes: [UInt8]) {
        var buffer = ByteBuffer(bytes: bytes)
        while true {
            let before = buffer
            let frame: LeanFrame?
            do {
                frame = try LeanFrame.parse(&buffer, maxFrameBytes: LeanProtocol.defaultMaxFrameBytes)
            } catch {
                return
            }
            guard let frame else {
                #expect(buffer == before, "nothing consumed when more bytes are needed")
                return
            }
            let consumed = before.readableBytes - buffer.readableBytes
            #expect(Array(frame.encoded().readableBytesView) == Array(before.readableBytesView.prefix(consumed)))
            if frame.kind == .request, let request = try? LeanRequest.parse(frame) {
                let again = try? LeanRequest.parse(request.frame(callID: frame.callID))
                #expect(again == request)
            }
            _ = try? frame.status()
            _ = try? frame.credits()
        }
    }

    /// The NIO decoder over the same bytes, split into random chunks, behind a valid preface.
    static func checkDecoder(_ bytes: [UInt8], _ random: inout SeededGenerator) {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(LeanFrameDecoder(maxFrameBytes: 1 << 20)))
        var input = LeanProtocol.preface + bytes
        while !input.isEmpty {
            let n = min(input.count, Int.random(in: 1...32, using: &random))
            do {
                try channel.writeInbound(ByteBuffer(bytes: input.prefix(n)))
            } catch {
                break
            }
            input.removeFirst(n)
        }
        while (try? channel.readInbound(as: LeanFrame.self)) ?? nil != nil {}
        _ = try? channel.finish()
    }

    @Test("mutated and random input never crashes the decoders")
    func fuzz() async throws {
        let seconds = Double(ProcessInfo.processInfo.environment["HERALD_FUZZ_SECONDS"] ?? "") ?? 0
        let seed = UInt64(ProcessInfo.processInfo.environment["HERALD_FUZZ_SEED"] ?? "") ?? 0x4845_524C_44
        var random = SeededGenerator(state: seed)
        let corpus = try Self.corpus()
        let deadline = Date().addingTimeInterval(seconds)
        var runs = 0
        while seconds > 0 ? Date() < deadline : runs < 20_000 {
            let input = Self.mutate(corpus.randomElement(using: &random)!, &random)
            Self.check(input)
            if runs % 8 == 0 { Self.checkDecoder(input, &random) }
            runs += 1
            // A turn of the pool now and then: 20,000 inputs held one core's only pool thread for 4 s.
            if runs % 500 == 0 { await Task.yield() }
        }
        print("lean frame fuzzing: \(runs) inputs, seed \(seed)")
        #expect(runs > 0)
    }

    @Test("a frame over the limit is refused from its header alone")
    func oversizeHeader() {
        var buffer = ByteBuffer(bytes: [0x01, 0x00, 0x00, 0x00, 1, 0])  // claims 16 MiB, carries 2 bytes
        #expect(throws: LeanProtocolError("frame of 16777216 bytes exceeds the limit of 1024 bytes")) {
            try LeanFrame.parse(&buffer, maxFrameBytes: 1024)
        }
    }

    @Test(
        "a short string: ASCII and other UTF-8 read in place, anything else or a short one refused, the reader moved past it"
    )
    func shortStrings() throws {
        func read(_ bytes: [UInt8]) throws -> (String, Int) {
            var buffer = ByteBuffer(bytes: [UInt8(bytes.count >> 8), UInt8(bytes.count & 0xff)] + bytes + [42])
            let string = try LeanRequest.readShortString(&buffer, "metadata value")
            return (string, buffer.readableBytes)
        }
        #expect(
            try read(Array("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00".utf8)) == (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", 1
            ))
        #expect(try read(Array("café ✓".utf8)) == ("café ✓", 1))
        #expect(try read(Array("abcdefgh-ijklmnop-é".utf8)) == ("abcdefgh-ijklmnop-é", 1))
        #expect(try read([]) == ("", 1))
        let eight = Array("abcdefgh".utf8)
        for bad: [UInt8] in [
            [0x61, 0xff], [0xc3], [0xe2, 0x9c], [0xed, 0xa0, 0x80], eight + [0xff], eight + eight + [0xc3],
        ] {
            #expect(throws: LeanProtocolError("metadata value is not UTF-8")) { try read(bad) }
        }
        var short = ByteBuffer(bytes: [0, 5, 0x61, 0x62])
        #expect(throws: LeanProtocolError("frame truncated in the metadata value")) {
            try LeanRequest.readShortString(&short, "metadata value")
        }
    }
}
