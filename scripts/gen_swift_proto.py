#!/usr/bin/env python3
"""Generates Herald's Swift value types over the protoc-c structs, and its typed services.

Input: a FileDescriptorSet written by protoc (--include_source_info). Output: one `<file>.pb.swift` per
.proto into MESSAGES_OUTDIR (HeraldProto), and one `<file>.services.swift` per .proto with services into
SERVICES_OUTDIR (HeraldRPC, whose MethodTable and RPCClient they use). Called by
scripts/generate-proto.sh; the output is committed and never edited.

Every message becomes a public struct conforming to HeraldMessage; its C conversion (into a CArena for
packing, out of an unpacked struct) is internal, so no module but HeraldProto sees a C pointer. Every
enum becomes a Swift enum with an `unrecognized(Int32)` case. Every service becomes a namespace of typed
method descriptors (`<Service>Methods`), a handler protocol (`<Service>Handler`, one async method per
RPC, with `register(into:)`), a client protocol (`<Service>ClientProtocol`) and its implementation over
an RPCClient (`<Service>Client`), the shape of grpc-swift-2's generated code. Only what Herald's contract uses is supported
(scalars, strings, bytes, enums, messages, repeated fields); anything else stops generation loudly.
"""
import re
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

F = descriptor_pb2.FieldDescriptorProto

SWIFT_KEYWORDS = {
    "associatedtype", "class", "deinit", "enum", "extension", "func", "import", "init", "inout", "internal",
    "let", "operator", "private", "protocol", "public", "static", "struct", "subscript", "typealias", "var",
    "break", "case", "continue", "default", "defer", "do", "else", "fallthrough", "for", "guard", "if", "in",
    "repeat", "return", "switch", "where", "while", "as", "catch", "false", "is", "nil", "rethrows", "super",
    "self", "Self", "throw", "throws", "true", "try", "Type", "Protocol",
}

SCALARS = {
    F.TYPE_INT32: "Int32", F.TYPE_SINT32: "Int32", F.TYPE_SFIXED32: "Int32",
    F.TYPE_INT64: "Int64", F.TYPE_SINT64: "Int64", F.TYPE_SFIXED64: "Int64",
    F.TYPE_UINT32: "UInt32", F.TYPE_FIXED32: "UInt32",
    F.TYPE_UINT64: "UInt64", F.TYPE_FIXED64: "UInt64",
    F.TYPE_DOUBLE: "Double", F.TYPE_FLOAT: "Float",
}


def camel_to_lower(name):
    """protobuf-c's CamelToLower: 'UpsertRegistrationRequest' -> 'upsert_registration_request'."""
    out, was_upper = "", True
    for ch in name:
        is_upper = ch.isupper()
        if is_upper:
            if not was_upper:
                out += "_"
            out += ch.lower()
        else:
            out += ch
        was_upper = is_upper
    return out


def c_type_name(package, path):
    """protobuf-c's struct/enum type name: 'herald.v1' + ['Registration'] -> 'Herald__V1__Registration'."""
    parts = [p[:1].upper() + p[1:] for p in package.split(".")] + list(path)
    return "__".join(parts)


def c_func_prefix(package, path):
    """protobuf-c's function prefix: 'herald__v1__upsert_registration_request'."""
    return "__".join(package.split(".") + [camel_to_lower(p) for p in path])


def lower_camel(snake):
    words = [w for w in snake.split("_") if w]
    out = []
    for i, w in enumerate(words):
        lw = w.lower()
        if i == 0:
            out.append(lw)
        elif lw == "id":
            out.append("ID")
        else:
            out.append(lw[:1].upper() + lw[1:])
    return "".join(out)


def escape_ident(name):
    return f"`{name}`" if name in SWIFT_KEYWORDS else name


# protoc-c names a C struct member after its field, lower-cased, with "_" appended when that is a
# C++ keyword (protobuf-c's c_helpers.cc, FieldName): a field `template` is the member `template_`.
CPP_KEYWORDS = set("""
and and_eq asm auto bitand bitor bool break case catch char class compl const const_cast continue
default delete do double dynamic_cast else enum explicit extern false float for friend goto if
inline int long mutable namespace new not not_eq operator or or_eq private protected public
register reinterpret_cast return short signed sizeof static static_cast struct switch template this
throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while xor
xor_eq
""".split())


def c_member(field_name):
    name = field_name.lower()
    return name + "_" if name in CPP_KEYWORDS else name


def doc(comments, indent):
    text = (comments or "").strip("\n")
    if not text.strip():
        return ""
    lines = [ln[1:] if ln.startswith(" ") else ln for ln in text.split("\n")]
    return "".join(f"{indent}///{(' ' + ln) if ln else ''}\n" for ln in lines)


class Generator:
    def __init__(self, fds):
        self.fds = fds
        self.types = {}  # ".pkg.Msg.Nested" -> dict(swift=..., c=..., fn=..., kind=message|enum)
        for f in fds.file:
            self._index(f.package, f.message_type, f.enum_type, [])
        seen = {}
        for full, t in self.types.items():
            if t["swift"] in seen:
                sys.exit(f"gen_swift_proto: Swift name clash: {full} and {seen[t['swift']]}")
            seen[t["swift"]] = full

    def _index(self, package, messages, enums, path):
        for e in enums:
            p = path + [e.name]
            self.types[f".{package}." + ".".join(p)] = dict(
                swift=".".join(p), c=c_type_name(package, p), kind="enum", desc=e)
        for m in messages:
            p = path + [m.name]
            self.types[f".{package}." + ".".join(p)] = dict(
                swift=".".join(p), c=c_type_name(package, p), fn=c_func_prefix(package, p), kind="message", desc=m)
            self._index(package, m.nested_type, m.enum_type, p)

    def generate(self, outdir, services_outdir):
        for f in self.fds.file:
            comments = {tuple(loc.path): loc.leading_comments for loc in f.source_code_info.location}
            name = f.name.replace("/", "_").replace(".proto", ".pb.swift")
            body = self.file(f, comments)
            (Path(outdir) / name).write_text(body)
            if f.service:
                name = f.name.replace("/", "_").replace(".proto", ".services.swift")
                (Path(services_outdir) / name).write_text(self.services_file(f, comments))

    def file(self, f, comments):
        out = [
            f"// Generated by scripts/gen_swift_proto.py from proto/{f.name}. Do not edit.\n",
            "\n",
            "internal import CHeraldProto\n",
            "public import GRPCCore\n",
            "\n",
        ]
        for i, e in enumerate(f.enum_type):
            out.append(self.enum(f.package, [e.name], e, comments, (5, i)))
        for i, m in enumerate(f.message_type):
            out.append(self.message(f.package, [m.name], m, comments, (4, i)))
        for i, s in enumerate(f.service):
            out.append(self.service(f.package, s, comments, (6, i)))
        return "".join(out).rstrip("\n") + "\n"

    # enums -------------------------------------------------------------------------------------
    def enum(self, package, path, e, comments, loc):
        swift = path[-1]
        prefix = re.sub(r"(?<!^)(?=[A-Z])", "_", swift).upper() + "_"
        cases = []
        for v in e.value:
            base = v.name[len(prefix):] if v.name.startswith(prefix) else v.name
            cases.append((escape_ident(lower_camel(base.lower())), v.number, v.name))
        if len({n for _, n, _ in cases}) != len(cases):
            sys.exit(f"gen_swift_proto: {swift}: aliased enum values are not supported")
        ind, ind2, ind3 = "    ", "        ", "            "
        s = doc(comments.get(loc), "")
        s += f"public enum {swift}: RawRepresentable, Hashable, Sendable, CustomStringConvertible {{\n"
        for i, (case, number, _) in enumerate(cases):
            s += doc(comments.get(loc + (2, i)), ind)
            s += f"{ind}case {case}  // = {number}\n"
        s += f"{ind}/// A number this build does not know (from a newer peer): kept, compared and sent on as is.\n"
        s += f"{ind}case unrecognized(Int32)\n\n"
        s += f"{ind}public init(rawValue: Int32) {{\n{ind2}switch rawValue {{\n"
        for case, number, _ in cases:
            s += f"{ind2}case {number}: self = .{case}\n"
        s += f"{ind2}default: self = .unrecognized(rawValue)\n{ind2}}}\n{ind}}}\n\n"
        s += f"{ind}public var rawValue: Int32 {{\n{ind2}switch self {{\n"
        for case, number, _ in cases:
            s += f"{ind2}case .{case}: {number}\n"
        s += f"{ind2}case .unrecognized(let value): value\n{ind2}}}\n{ind}}}\n\n"
        s += f"{ind}/// Equal when the numbers are: `.unrecognized({cases[0][1]})` is `.{cases[0][0]}`.\n"
        s += f"{ind}public static func == (lhs: Self, rhs: Self) -> Bool {{ lhs.rawValue == rhs.rawValue }}\n"
        s += f"{ind}public func hash(into hasher: inout Hasher) {{ hasher.combine(rawValue) }}\n"
        s += f"\n{ind}/// Every value this build knows, in declaration order.\n"
        s += f"{ind}public static let knownValues: [{swift}] = [{', '.join('.' + c for c, _, _ in cases)}]\n\n"
        s += f"{ind}/// The proto name of the value, or the number for a value this build does not know.\n"
        s += f"{ind}public var description: String {{\n{ind2}switch self {{\n"
        for case, _, name in cases:
            s += f'{ind2}case .{case}: "{name}"\n'
        s += f'{ind2}case .unrecognized(let value): "{swift}(\\(value))"\n{ind2}}}\n{ind}}}\n}}\n\n'
        if len(path) > 1:
            s = f"extension {'.'.join(path[:-1])} {{\n" + "".join(
                (ind + ln if ln.strip() else ln) for ln in s.splitlines(keepends=True)).rstrip("\n") + "\n}\n\n"
        return s

    # messages ----------------------------------------------------------------------------------
    def field_info(self, fd, owner):
        if fd.proto3_optional or fd.HasField("oneof_index"):
            sys.exit(f"gen_swift_proto: {owner}.{fd.name}: optional/oneof fields are not supported")
        repeated = fd.label == F.LABEL_REPEATED
        t = fd.type
        if t == F.TYPE_STRING:
            kind, swift, default = "string", "String", '""'
        elif t == F.TYPE_BYTES:
            kind, swift, default = "bytes", "[UInt8]", "[]"
        elif t == F.TYPE_BOOL:
            kind, swift, default = "bool", "Bool", "false"
        elif t in SCALARS:
            kind, swift, default = "scalar", SCALARS[t], "0"
        elif t == F.TYPE_ENUM:
            ref = self.types[fd.type_name]
            kind, swift, default = "enum", ref["swift"], f"{ref['swift']}(rawValue: 0)"
        elif t == F.TYPE_MESSAGE:
            ref = self.types[fd.type_name]
            if ref["desc"].options.map_entry:
                sys.exit(f"gen_swift_proto: {owner}.{fd.name}: map fields are not supported")
            kind, swift, default = "message", ref["swift"], "nil"
        else:
            sys.exit(f"gen_swift_proto: {owner}.{fd.name}: field type {t} is not supported")
        if repeated:
            swift_type, default = f"[{swift}]", "[]"
        elif kind == "message":
            swift_type = f"{swift}?"
        else:
            swift_type = swift
        return dict(kind=kind, repeated=repeated, swift=swift, swift_type=swift_type, default=default,
                    name=escape_ident(lower_camel(fd.name)), c=c_member(fd.name), proto=fd.name)

    def decode_line(self, f):
        n, c, sw = f["name"], f["c"], f["swift"]
        if f["repeated"]:
            conv = {
                "string": f"CBridge.strings(m.n_{c}, m.{c})",
                "bytes": f"(0..<m.n_{c}).map {{ CBridge.bytes(m.{c}[$0]) }}",
                "bool": f"(0..<m.n_{c}).map {{ m.{c}[$0] != 0 }}",
                "scalar": f"CBridge.array(m.n_{c}, m.{c})",
                "enum": f"(0..<m.n_{c}).map {{ {sw}(rawValue: Int32(truncatingIfNeeded: m.{c}[$0].rawValue)) }}",
                "message": f"(0..<m.n_{c}).map {{ {sw}(_c: m.{c}[$0]!) }}",
            }[f["kind"]]
        else:
            conv = {
                "string": f"CBridge.string(m.{c})",
                "bytes": f"CBridge.bytes(m.{c})",
                "bool": f"m.{c} != 0",
                "scalar": f"m.{c}",
                "enum": f"{sw}(rawValue: Int32(truncatingIfNeeded: m.{c}.rawValue))",
                "message": f"m.{c}.map {{ {sw}(_c: $0) }}",
            }[f["kind"]]
        return f"self.{n} = {conv}"

    def encode_lines(self, f, owner):
        n, c = f["name"], f["c"]
        field = f'"{owner}.{f["proto"]}"'
        if f["repeated"]:
            conv = {
                "string": f"try arena.strings(self.{n}, field: {field})",
                "bytes": f"self.{n}.map {{ arena.binary($0) }}",
                "bool": f"self.{n}.map {{ $0 ? 1 : 0 }}",
                "scalar": f"self.{n}",
                "enum": f"self.{n}.map {{ .init(rawValue: .init(truncatingIfNeeded: $0.rawValue)) }}",
                "message": f"try self.{n}.map {{ Optional(try $0._toC(arena)) }}",
            }[f["kind"]]
            if f["kind"] == "string":
                return [f"p.pointee.n_{c} = self.{n}.count", f"p.pointee.{c} = {conv}"]
            return [f"p.pointee.n_{c} = self.{n}.count", f"p.pointee.{c} = arena.array({conv})"]
        conv = {
            "string": f"try arena.string(self.{n}, field: {field})",
            "bytes": f"arena.binary(self.{n})",
            "bool": f"self.{n} ? 1 : 0",
            "scalar": f"self.{n}",
            "enum": f".init(rawValue: .init(truncatingIfNeeded: self.{n}.rawValue))",
            "message": f"try self.{n}?._toC(arena)",
        }[f["kind"]]
        return [f"p.pointee.{c} = {conv}"]

    def message(self, package, path, m, comments, loc):
        full = f".{package}." + ".".join(path)
        t = self.types[full]
        swift_name, qualified = path[-1], ".".join(path)
        proto_name = f"{package}.{'.'.join(path)}"
        if m.nested_type:
            sys.exit(f"gen_swift_proto: {proto_name}: nested messages are not supported (nested enums are)")
        fields = [self.field_info(fd, proto_name) for fd in m.field]
        ind, ind2, ind3 = "    ", "        ", "            "

        s = doc(comments.get(loc), "")
        s += f"public struct {swift_name}: HeraldMessage {{\n"
        for i, f in enumerate(fields):
            s += doc(comments.get(loc + (2, i)), ind)
            s += f"{ind}public var {f['name']}: {f['swift_type']}\n"
        if fields:
            s += "\n"
        if fields:
            params = ", ".join(f"{f['name'].strip('`')}: {f['swift_type']} = {f['default']}" for f in fields)
            s += f"{ind}public init({params}) {{\n"
            for f in fields:
                s += f"{ind2}self.{f['name']} = {f['name'].strip('`')}\n"
            s += f"{ind}}}\n\n"
            s += f"{ind}public init() {{\n"
            for f in fields:
                s += f"{ind2}self.{f['name']} = {f['default']}\n"
            s += f"{ind}}}\n\n"
        else:
            s += f"{ind}public init() {{}}\n\n"
        s += f'{ind}public static let protoName = "{proto_name}"\n\n'
        s += f"{ind}public init<Bytes: GRPCContiguousBytes>(serializedBytes bytes: Bytes) throws {{\n"
        s += f"{ind2}self = try CBridge.decode(Self.self, from: bytes)\n{ind}}}\n\n"
        s += f"{ind}public func serializedBytes<Bytes: GRPCContiguousBytes>() throws -> Bytes {{\n"
        s += f"{ind2}try CBridge.encode(self)\n{ind}}}\n"
        s += "}\n\n"

        s += f"extension {qualified}: CBacked {{\n"
        s += f"{ind}typealias CType = {t['c']}\n\n"
        s += f"{ind}init(_c pointer: UnsafePointer<CType>) {{\n"
        if fields:
            s += f"{ind2}let m = pointer.pointee\n"
            for f in fields:
                s += f"{ind2}{self.decode_line(f)}\n"
        else:
            s += f"{ind2}_ = pointer\n{ind2}self.init()\n"
        s += f"{ind}}}\n\n"
        s += f"{ind}func _toC(_ arena: CArena) throws -> UnsafeMutablePointer<CType> {{\n"
        s += f"{ind2}let p = arena.allocate(CType.self)\n{ind2}{t['fn']}__init(p)\n"
        for f in fields:
            for line in self.encode_lines(f, proto_name):
                s += f"{ind2}{line}\n"
        s += f"{ind2}return p\n{ind}}}\n\n"
        fn = t["fn"]
        s += f"{ind}static func _packedSize(_ p: UnsafePointer<CType>) -> Int {{ {fn}__get_packed_size(p) }}\n"
        s += f"{ind}static func _pack(_ p: UnsafePointer<CType>, _ out: UnsafeMutablePointer<UInt8>) -> Int {{\n"
        s += f"{ind2}{fn}__pack(p, out)\n{ind}}}\n"
        s += f"{ind}static func _unpack(_ count: Int, _ data: UnsafePointer<UInt8>) -> UnsafeMutablePointer<CType>? {{\n"
        s += f"{ind2}{fn}__unpack(nil, count, data)\n{ind}}}\n"
        s += f"{ind}static func _free(_ p: UnsafeMutablePointer<CType>) {{ {fn}__free_unpacked(p, nil) }}\n"
        s += "}\n\n"

        for i, e in enumerate(m.enum_type):
            s += self.enum(package, path + [e.name], e, comments, loc + (4, i))
        return s

    # services ----------------------------------------------------------------------------------
    def service(self, package, svc, comments, loc):
        ind = "    "
        full = f"{package}.{svc.name}"
        s = doc(comments.get(loc), "")
        s += f"/// Method descriptors of `{full}`.\n"
        s += f"public enum {svc.name}Methods {{\n"
        s += f'{ind}/// The fully qualified service name.\n{ind}public static let serviceName = "{full}"\n\n'
        names = []
        for i, m in enumerate(svc.method):
            if m.client_streaming:
                sys.exit(f"gen_swift_proto: {full}/{m.name}: client streaming is not supported")
            req, res = self.types[m.input_type]["swift"], self.types[m.output_type]["swift"]
            kind = "ServerStreamingMethod" if m.server_streaming else "UnaryMethod"
            prop = escape_ident(m.name[:1].lower() + m.name[1:])
            names.append(prop)
            s += doc(comments.get(loc + (2, i)), ind)
            s += f'{ind}public static let {prop} = {kind}<{req}, {res}>(service: serviceName, method: "{m.name}")\n'
        s += f"\n{ind}/// Every method's full name, \"package.Service/Method\".\n"
        s += f"{ind}public static let allMethodNames: [String] = [{', '.join(n + '.fullName' for n in names)}]\n"
        s += "}\n\n"
        return s

    # typed services (into HeraldRPC: they need its MethodTable and RPCClient) ------------------
    def services_file(self, f, comments):
        out = [
            f"// Generated by scripts/gen_swift_proto.py from proto/{f.name}. Do not edit.\n",
            "\n",
            "public import HeraldProto\n",
            "\n",
        ]
        for i, svc in enumerate(f.service):
            out.append(self.typed_service(f.package, svc, comments, (6, i)))
        return "".join(out).rstrip("\n") + "\n"

    def typed_service(self, package, svc, comments, loc):
        ind, ind2 = "    ", "        "
        full = f"{package}.{svc.name}"
        methods = []
        for i, m in enumerate(svc.method):
            methods.append(dict(
                name=escape_ident(m.name[:1].lower() + m.name[1:]),
                req=self.types[m.input_type]["swift"], res=self.types[m.output_type]["swift"],
                streaming=m.server_streaming, doc=doc(comments.get(loc + (2, i)), ind)))
        handler, client, proto = f"{svc.name}Handler", f"{svc.name}Client", f"{svc.name}ClientProtocol"
        desc = f"{svc.name}Methods"

        s = f"/// The server side of `{full}`: one method per RPC, so a service that leaves one out does not\n"
        s += f"/// compile. ``register(into:)`` puts them all in a ``MethodTable``, served by both transports.\n"
        s += f"public protocol {handler}: Sendable {{\n"
        for m in methods:
            s += m["doc"]
            if m["streaming"]:
                s += (f"{ind}func {m['name']}(_ request: {m['req']}, context: RPCContext, "
                      f"responses: ResponseStream<{m['res']}>) async throws\n")
            else:
                s += f"{ind}func {m['name']}(_ request: {m['req']}, context: RPCContext) async throws -> {m['res']}\n"
        s += "}\n\n"
        s += f"extension {handler} {{\n"
        s += f"{ind}/// Registers every RPC of `{full}` into `table`.\n"
        s += f"{ind}public func register(into table: inout MethodTable) {{\n"
        for m in methods:
            bare = m["name"].strip("`")
            if m["streaming"]:
                s += (f"{ind2}table.register({desc}.{bare}) {{ request, context, responses in\n"
                      f"{ind2}    try await self.{m['name']}(request, context: context, responses: responses)\n{ind2}}}\n")
            else:
                s += (f"{ind2}table.register({desc}.{bare}) {{ request, context in\n"
                      f"{ind2}    try await self.{m['name']}(request, context: context)\n{ind2}}}\n")
        s += f"{ind}}}\n}}\n\n"

        s += f"/// The client side of `{full}`, as a protocol so callers can be tested against a fake.\n"
        s += f"public protocol {proto}: Sendable {{\n"
        for m in methods:
            s += m["doc"]
            if m["streaming"]:
                s += (f"{ind}func {m['name']}(\n{ind2}_ request: {m['req']}, options: RPCCallOptions,\n"
                      f"{ind2}onMessage: @escaping @Sendable ({m['res']}) async throws -> Void\n{ind}) async throws\n")
            else:
                s += f"{ind}func {m['name']}(_ request: {m['req']}, options: RPCCallOptions) async throws -> {m['res']}\n"
        s += "}\n\n"
        s += f"extension {proto} {{\n"
        for m in methods:
            if m["streaming"]:
                s += (f"{ind}public func {m['name']}(\n{ind2}_ request: {m['req']}, requestID: String? = nil, "
                      f"timeout: Duration? = nil,\n{ind2}onMessage: @escaping @Sendable ({m['res']}) async throws -> Void\n"
                      f"{ind}) async throws {{\n{ind2}try await {m['name']}(request, options: RPCCallOptions(requestID: requestID, "
                      f"timeout: timeout), onMessage: onMessage)\n{ind}}}\n")
            else:
                s += (f"{ind}public func {m['name']}(\n{ind2}_ request: {m['req']}, requestID: String? = nil, timeout: Duration? = nil\n"
                      f"{ind}) async throws -> {m['res']} {{\n{ind2}try await {m['name']}(request, options: RPCCallOptions("
                      f"requestID: requestID, timeout: timeout))\n{ind}}}\n")
        s = s.rstrip("\n") + "\n}\n\n"
        s += f"/// `{full}` over an ``RPCClient`` (either transport, Unix socket or TCP+TLS).\n"
        s += f"public struct {client}: {proto} {{\n"
        s += f"{ind}/// The connection; run it (it is a lifecycle `Service`) before calling.\n"
        s += f"{ind}public let rpc: RPCClient\n\n"
        s += f"{ind}public init(_ rpc: RPCClient) {{\n{ind2}self.rpc = rpc\n{ind}}}\n\n"
        for m in methods:
            bare = m["name"].strip("`")
            if m["streaming"]:
                s += (f"{ind}public func {m['name']}(\n{ind2}_ request: {m['req']}, options: RPCCallOptions,\n"
                      f"{ind2}onMessage: @escaping @Sendable ({m['res']}) async throws -> Void\n{ind}) async throws {{\n"
                      f"{ind2}try await rpc.stream({desc}.{bare}, request, options: options, onMessage: onMessage)\n{ind}}}\n\n")
            else:
                s += (f"{ind}public func {m['name']}(_ request: {m['req']}, options: RPCCallOptions) async throws -> {m['res']} {{\n"
                      f"{ind2}try await rpc.call({desc}.{bare}, request, options: options)\n{ind}}}\n\n")
        s = s.rstrip("\n") + "\n}\n\n"
        return s


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: gen_swift_proto.py DESCRIPTORS.pb MESSAGES_OUTDIR SERVICES_OUTDIR")
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(Path(sys.argv[1]).read_bytes())
    Generator(fds).generate(sys.argv[2], sys.argv[3])


if __name__ == "__main__":
    main()
