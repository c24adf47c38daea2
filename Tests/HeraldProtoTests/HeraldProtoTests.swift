import GRPCCore
import HeraldProto
import HeraldTestSupport
import Testing

@Suite("protobuf-c messages", .watchedForStalls)
struct HeraldProtoTests {
    @Test("encodes the standard protobuf wire format")
    func wireFormat() throws {
        // Field 1, length-delimited, "a" — what any protobuf implementation writes.
        let bytes: [UInt8] = try AuthenticateRequest(authorization: "a").serializedBytes()
        #expect(bytes == [0x0a, 0x01, 0x61])
        // Field 3 varint (platform = 2), field 6 varint (updated_at = 300).
        let registration: [UInt8] = try Registration(platform: .fcm, updatedAtUnixMs: 300).serializedBytes()
        #expect(registration == [0x18, 0x02, 0x30, 0xac, 0x02])
    }

    @Test("round-trips scalars, enums and repeated strings")
    func registrationRoundTrip() throws {
        let original = Registration(
            registrationID: "r-1", owner: "alice", platform: .apns, handle: "ab" + String(repeating: "cd", count: 31),
            tags: ["news", "username:alice", "ünïcødé✓"], updatedAtUnixMs: 1_795_000_000_000)
        let bytes: [UInt8] = try original.serializedBytes()
        #expect(try Registration(serializedBytes: bytes) == original)
    }

    @Test("round-trips nested, absent and repeated messages")
    func nestedMessages() throws {
        let registrations = (0..<3).map { Registration(registrationID: "r-\($0)", owner: "o\($0)", tags: ["t\($0)"]) }
        let list = ListRegistrationsResponse(registrations: registrations)
        #expect(try ListRegistrationsResponse(serializedBytes: list.serializedBytes() as [UInt8]) == list)

        let present = UpsertRegistrationResponse(registration: registrations[1])
        #expect(try UpsertRegistrationResponse(serializedBytes: present.serializedBytes() as [UInt8]) == present)
        let absent = UpsertRegistrationResponse()
        let decoded = try UpsertRegistrationResponse(serializedBytes: absent.serializedBytes() as [UInt8])
        #expect(decoded.registration == nil)
    }

    @Test("round-trips every byte value and repeated sub-messages")
    func bytesRoundTrip() throws {
        let entry = InboxEntry(
            sequence: 7, notificationID: "n-1", registrationID: "r-1", platform: .wns, handle: "h",
            headers: [
                Header(name: "x-wns-type", value: "wns/raw"),
                Header(name: "content-type", value: "application/octet-stream"),
            ],
            payload: Array(0...255) + [0, 0], recordedAtUnixMs: -1)
        #expect(try InboxEntry(serializedBytes: entry.serializedBytes() as [UInt8]) == entry)
    }

    @Test("an empty message is zero bytes, and zero bytes decode to defaults")
    func emptyMessages() throws {
        let bytes: [UInt8] = try DeleteRegistrationResponse().serializedBytes()
        #expect(bytes.isEmpty)
        #expect(try DeleteRegistrationResponse(serializedBytes: [UInt8]()) == DeleteRegistrationResponse())
        #expect(try Registration(serializedBytes: [UInt8]()) == Registration())
    }

    @Test("a 4 MiB field survives the round trip")
    func largeMessage() throws {
        // Made by copying a 4 KiB block, not element by element: a 4-million-step loop in a debug
        // build held a thread of the cooperative pool for seconds (the stall watch).
        let block = (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let content = [UInt8](unsafeUninitializedCapacity: 4 << 20) { buffer, count in
            for offset in stride(from: 0, to: 4 << 20, by: 4096) {
                block.withUnsafeBufferPointer { source in
                    UnsafeMutableRawPointer(buffer.baseAddress! + offset).copyMemory(
                        from: source.baseAddress!, byteCount: 4096)
                }
            }
            count = 4 << 20
        }
        let request = StorePayloadRequest(recipient: "alice", kind: .rich, content: content, contentType: "image/png")
        #expect(try StorePayloadRequest(serializedBytes: request.serializedBytes() as [UInt8]) == request)
    }

    @Test("a string with a NUL is refused instead of being cut")
    func embeddedNUL() {
        #expect(throws: ProtoError.embeddedNUL(field: "herald.v1.AuthenticateRequest.authorization")) {
            let _: [UInt8] = try AuthenticateRequest(authorization: "Basic a\u{0}b").serializedBytes()
        }
        #expect(throws: ProtoError.embeddedNUL(field: "herald.v1.UpsertRegistrationRequest.tags")) {
            let _: [UInt8] = try UpsertRegistrationRequest(tags: ["ok", "bad\u{0}"]).serializedBytes()
        }
    }

    @Test("bytes protobuf-c rejects are a malformed error, not a crash")
    func malformed() {
        // Field 1 claims 10 bytes of string, only 1 follows.
        #expect(throws: ProtoError.malformed("herald.v1.AuthenticateRequest")) {
            _ = try AuthenticateRequest(serializedBytes: [0x0a, 0x0a, 0x61] as [UInt8])
        }
        #expect(throws: ProtoError.malformed("herald.v1.Registration")) {
            _ = try Registration(
                serializedBytes: [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff] as [UInt8])
        }
    }

    @Test("an enum value this build does not know is kept")
    func unknownEnumValue() throws {
        let future = Registration(platform: Platform(rawValue: 42))
        let decoded = try Registration(serializedBytes: future.serializedBytes() as [UInt8])
        #expect(decoded.platform.rawValue == 42)
        #expect(decoded.platform.description == "Platform(42)")
        #expect(Platform.apns.description == "PLATFORM_APNS")
    }

    @Test("grpc-swift serializers map codec failures to INVALID_ARGUMENT")
    func grpcSerializers() throws {
        let request = FetchPayloadRequest(id: 9, requester: "bob")
        let bytes: [UInt8] = try HeraldSerializer<FetchPayloadRequest>().serialize(request)
        #expect(try HeraldDeserializer<FetchPayloadRequest>().deserialize(bytes) == request)
        #expect {
            _ = try HeraldDeserializer<FetchPayloadRequest>().deserialize([0x12, 0x05] as [UInt8])
        } throws: { error in
            (error as? RPCError)?.code == .invalidArgument
        }
        #expect {
            let _: [UInt8] = try HeraldSerializer<AuthenticateRequest>().serialize(
                AuthenticateRequest(authorization: "\u{0}"))
        } throws: { error in
            (error as? RPCError)?.code == .invalidArgument
        }
    }

    @Test("method descriptors name the gRPC routes")
    func methodNames() {
        #expect(PayloadServiceMethods.fetchPayload.fullName == "herald.v1.PayloadService/FetchPayload")
        #expect(HealthMethods.check.fullName == "grpc.health.v1.Health/Check")
        #expect(RegistrationServiceMethods.allMethodNames.count == 23)
        #expect(
            RegistrationServiceMethods.allMethodNames.contains("herald.v1.RegistrationService/ListHubRegistrations"))
        #expect(RegistrationServiceMethods.allMethodNames.contains("herald.v1.RegistrationService/EraseUserDevices"))
        #expect(DispatchServiceMethods.allMethodNames.contains("herald.v1.DispatchService/EraseDevices"))
        #expect(RegistrationServiceMethods.allMethodNames.contains("herald.v1.RegistrationService/CheckHandles"))
        #expect(RegistrationServiceMethods.allMethodNames.contains("herald.v1.RegistrationService/ListDevices"))
        #expect(DispatchServiceMethods.allMethodNames.contains("herald.v1.DispatchService/ListSends"))
        #expect(DispatchServiceMethods.allMethodNames.contains("herald.v1.DispatchService/SendStats"))
        #expect(DispatchServiceMethods.allMethodNames.contains("herald.v1.DispatchService/CancelScheduled"))
        #expect(RegistrationServiceMethods.allMethodNames.contains("herald.v1.RegistrationService/PatchInstallation"))
        #expect(AuthServiceMethods.allMethodNames.contains("herald.v1.AuthService/AuthorizeSas"))
        #expect(RegistrationServiceMethods.allMethodNames.contains("herald.v1.RegistrationService/ResetForTests"))
    }
}
