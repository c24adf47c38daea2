import Tracing
import W3CTraceContext

/// Protobuf's wire format, written forward into one buffer: enough for OTLP's trace messages.
///
/// Herald's own messages are protobuf-c (proto/), but OTLP's are not Herald's contract, and
/// building protobuf-c's nested C structs for a batch of spans from Swift needs an allocation per
/// span, attribute and value. This writer is the whole encoder; `OTLPTraceEncodingTests` and the
/// tracing integration test decode its output with the OpenTelemetry project's own Python
/// classes (PyPI opentelemetry-proto).
///
/// A nested message is written in place, its length filled in once known: no buffer of its own
/// and no copy per message, key or value (that was most of an export's cost, callgrind).
struct ProtoWriter {
    var bytes: [UInt8] = []

    mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    mutating func tag(_ field: Int, _ wireType: UInt64) { varint(UInt64(field) << 3 | wireType) }

    mutating func bytesField(_ field: Int, _ value: UnsafeRawBufferPointer) {
        tag(field, 2)
        varint(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    /// A string field; an empty one is left out (proto3's default).
    mutating func string(_ field: Int, _ value: String) {
        guard !value.isEmpty else { return }
        stringValue(field, value)
    }

    /// A string field, written even when empty (a oneof member: AnyValue.string_value).
    mutating func stringValue(_ field: Int, _ value: String) {
        var value = value
        value.withUTF8 { bytesField(field, UnsafeRawBufferPointer($0)) }
    }

    mutating func fixed64(_ field: Int, _ value: UInt64) {
        tag(field, 1)
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func fixed32(_ field: Int, _ value: UInt32) {
        tag(field, 5)
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func uint(_ field: Int, _ value: UInt64) {
        guard value != 0 else { return }
        tag(field, 0)
        varint(value)
    }

    /// A nested message, built in place behind a one-byte length; a message of 128 bytes or more
    /// moves its bytes up to make room for the longer varint.
    mutating func message(_ field: Int, _ build: (inout ProtoWriter) -> Void) {
        tag(field, 2)
        let at = bytes.count
        bytes.append(0)
        build(&self)
        let length = bytes.count - at - 1
        guard length >= 0x80 else {
            bytes[at] = UInt8(length)
            return
        }
        var prefix = ProtoWriter()
        prefix.varint(UInt64(length))
        bytes.replaceSubrange(at..<(at + 1), with: prefix.bytes)
    }
}

/// `opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest`, field numbers from
/// opentelemetry-proto's trace.proto, common.proto and resource.proto (v1).
enum OTLPTraceEncoding {
    static func exportRequest(
        resource: [(String, String)], scope: String, version: String, spans: [FinishedSpan]
    ) -> [UInt8] {
        var request = ProtoWriter()
        // About what a span of Herald's takes (ids, name, times, a handful of attributes), so that a
        // full batch is not copied a dozen times as the buffer doubles.
        request.bytes.reserveCapacity(512 + 320 * spans.count)
        // ExportTraceServiceRequest.resource_spans = 1
        request.message(1) { resourceSpans in
            // ResourceSpans.resource = 1: Resource.attributes = 1
            resourceSpans.message(1) { resourceMessage in
                for (key, value) in resource { resourceMessage.message(1) { keyValue(&$0, key, .string(value)) } }
            }
            // ResourceSpans.scope_spans = 2
            resourceSpans.message(2) { scopeSpans in
                // ScopeSpans.scope = 1: InstrumentationScope.name = 1, version = 2
                scopeSpans.message(1) {
                    $0.string(1, scope)
                    $0.string(2, version)
                }
                // ScopeSpans.spans = 2
                for span in spans { scopeSpans.message(2) { encode(span, into: &$0) } }
            }
        }
        return request.bytes
    }

    static func encode(_ span: FinishedSpan, into writer: inout ProtoWriter) {
        id(&writer, 1, span.trace.traceID)  // trace_id
        id(&writer, 2, span.trace.spanID)  // span_id
        writer.string(3, span.trace.traceStateHeaderValue ?? "")  // trace_state
        if let parent = span.parentSpanID { id(&writer, 4, parent) }  // parent_span_id
        writer.string(5, span.name)  // name
        writer.uint(6, kind(span.kind))  // kind
        writer.fixed64(7, span.startNanos)  // start_time_unix_nano
        writer.fixed64(8, max(span.endNanos, span.startNanos))  // end_time_unix_nano
        attributes(span.attributes, field: 9, into: &writer)
        for event in span.events {  // events = 11: time_unix_nano = 1, name = 2, attributes = 3
            writer.message(11) { message in
                message.fixed64(1, event.nanosecondsSinceEpoch)
                message.string(2, event.name)
                attributes(event.attributes, field: 3, into: &message)
            }
        }
        for link in span.links {  // links = 13: trace_id = 1, span_id = 2, trace_state = 3, attributes = 4
            writer.message(13) { message in
                id(&message, 1, link.trace.traceID)
                id(&message, 2, link.trace.spanID)
                message.string(3, link.trace.traceStateHeaderValue ?? "")
                attributes(link.attributes, field: 4, into: &message)
            }
        }
        if let status = span.status {  // status = 15: message = 2, code = 3 (1 OK, 2 ERROR)
            writer.message(15) { message in
                message.string(2, status.message ?? "")
                message.uint(3, status.code == .ok ? 1 : 2)
            }
        }
        writer.fixed32(16, UInt32(span.trace.flags.rawValue))  // flags: the W3C trace flags
    }

    /// Span.SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    static func kind(_ kind: SpanKind) -> UInt64 {
        switch kind {
        case .server: 2
        case .client: 3
        case .producer: 4
        case .consumer: 5
        default: 1
        }
    }

    /// Each attribute as a KeyValue in repeated field `field`. (SpanAttributes is not a Sequence:
    /// its own `forEach` is the only way through it.)
    static func attributes(_ attributes: SpanAttributes, field: Int, into writer: inout ProtoWriter) {
        // swift-format-ignore: ReplaceForEachWithForLoop
        attributes.forEach { key, value in writer.message(field) { keyValue(&$0, key, value) } }
    }

    /// A recorded span's attributes as KeyValues in repeated field `field`.
    static func attributes(_ attributes: AttributeList, field: Int, into writer: inout ProtoWriter) {
        for (key, value) in zip(attributes.keys, attributes.values) {
            writer.message(field) { keyValue(&$0, key, value) }
        }
    }

    /// KeyValue: key = 1, value = 2 (AnyValue: string 1, bool 2, int 3, double 4, array 5).
    static func keyValue(_ writer: inout ProtoWriter, _ key: String, _ value: SpanAttribute) {
        writer.string(1, key)
        writer.message(2) { anyValue(&$0, value) }
    }

    static func anyValue(_ writer: inout ProtoWriter, _ value: SpanAttribute) {
        func array(_ values: [SpanAttribute]) {
            writer.message(5) { list in for value in values { list.message(1) { anyValue(&$0, value) } } }
        }
        switch value {
        case .string(let text): writer.stringValue(1, text)
        case .bool(let flag):
            writer.tag(2, 0)
            writer.varint(flag ? 1 : 0)
        case .int32(let number):
            writer.tag(3, 0)
            writer.varint(UInt64(bitPattern: Int64(number)))
        case .int64(let number):
            writer.tag(3, 0)
            writer.varint(UInt64(bitPattern: number))
        case .double(let number): writer.fixed64(4, number.bitPattern)
        case .stringArray(let texts): array(texts.map { .string($0) })
        case .int32Array(let numbers): array(numbers.map { .int64(Int64($0)) })
        case .int64Array(let numbers): array(numbers.map { .int64($0) })
        case .doubleArray(let numbers): array(numbers.map { .double($0) })
        case .boolArray(let flags): array(flags.map { .bool($0) })
        case .stringConvertible(let value): writer.stringValue(1, value.description)
        case .stringConvertibleArray(let values): array(values.map { .string($0.description) })
        default: writer.stringValue(1, "\(value)")
        }
    }

    static func bytes(_ id: TraceID) -> [UInt8] { withUnsafeBytes(of: id.bytes) { Array($0) } }

    static func id(_ writer: inout ProtoWriter, _ field: Int, _ id: TraceID) {
        withUnsafeBytes(of: id.bytes) { writer.bytesField(field, $0) }
    }

    static func id(_ writer: inout ProtoWriter, _ field: Int, _ id: SpanID) {
        withUnsafeBytes(of: id.bytes) { writer.bytesField(field, $0) }
    }
}
