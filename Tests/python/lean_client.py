"""A client of Herald's lean RPC protocol (docs/rpc-protocol.md) using only the stock protobuf
package and the standard library's socket module. Unary calls only; enough to show the protocol
is small and independent of Herald's Swift code."""
import socket
import struct

PREFACE = b"HRLD\x01\x00\x00\x00"
REQUEST, MESSAGE, END, CANCEL, WINDOW, GOAWAY, ERROR = range(1, 8)
STATUS_NAMES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
                "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]


class LeanError(Exception):
    """A call ended with a status other than OK."""

    def __init__(self, code, message):
        super().__init__(f"{STATUS_NAMES[code] if code < len(STATUS_NAMES) else code}: {message}")
        self.code = code
        self.name = STATUS_NAMES[code] if code < len(STATUS_NAMES) else str(code)
        self.message = message


class LeanClient:
    def __init__(self, path, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.sock.sendall(PREFACE)
        preface = self._read_exact(8)
        if preface[:4] != PREFACE[:4] or preface[4] != PREFACE[4]:
            raise ConnectionError(f"not a Herald lean-protocol server: {preface!r}")
        self.next_id = 1

    def close(self):
        self.sock.close()

    def _read_exact(self, count):
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("connection closed")
            data += chunk
        return data

    def _read_frame(self):
        (length,) = struct.unpack(">I", self._read_exact(4))
        body = self._read_exact(length)
        kind, _flags, call = struct.unpack(">BBI", body[:6])
        return kind, call, body[6:]

    def _send_frame(self, kind, call, payload):
        self.sock.sendall(struct.pack(">IBBI", 6 + len(payload), kind, 0, call) + payload)

    @staticmethod
    def _short(text):
        data = text.encode()
        return struct.pack(">H", len(data)) + data

    def call(self, method, request, response_class, timeout_ms=5000, metadata=()):
        """Calls a unary RPC: method is "package.Service/Method", request a protobuf message."""
        call_id = self.next_id
        self.next_id += 1
        head = struct.pack(">II", timeout_ms, 0) + self._short(method) + struct.pack(">H", len(metadata))
        for key, value in metadata:
            head += self._short(key) + self._short(value)
        self._send_frame(REQUEST, call_id, head + request.SerializeToString())
        response = None
        while True:
            kind, call, payload = self._read_frame()
            if kind == ERROR:
                raise LeanError(payload[0], payload[1:].decode())
            if kind == GOAWAY or call != call_id:
                continue
            if kind == MESSAGE:
                response = response_class.FromString(payload)
            elif kind == END:
                if payload[0] != 0:
                    raise LeanError(payload[0], payload[1:].decode())
                return response
