import Foundation
import GRPCNIOTransportHTTP2Posix
import HeraldModel
import Metrics
public import NIOSSL

/// `herald_tls_certificate_expiry_timestamp_seconds{use}`: when the certificate a process presents
/// stops being valid (Unix seconds), so an alert can fire weeks before it does. `use`: `rpc` (its
/// RPC listeners), `rpc-client` (the one it presents as a caller), `http` (the edge's HTTPS).
public enum CertificateExpiry {
    /// The gauge's name; herald-dispatch records hubs' APNs certificates under it too.
    public static let label = "herald_tls_certificate_expiry_timestamp_seconds"

    public static func record(_ chain: [NIOSSLCertificate], use: String) {
        guard let leaf = chain.first else { return }
        Gauge(label: label, dimensions: [("use", use)]).record(
            Double(leaf.notValidAfter))
    }

    /// Reads the PEM chain at `path` for ``record(_:use:)``; an unreadable file is left to the
    /// TLS set-up that reads it too, which reports it.
    public static func record(file path: String, use: String) {
        if let chain = try? NIOSSLCertificate.fromPEMFile(path) { record(chain, use: use) }
    }
}

/// The certificates of TCP endpoints, from PEM files.
///
/// - `tls-cert`, `tls-key`: this process's certificate chain and key: its server identity when it
///   listens on TCP, its client identity (mutual TLS) when it calls over TCP.
/// - `tls-ca`: the CA bundle that server certificates (and, with `tls-require-client-cert`, client
///   certificates) must chain to. Empty: the system's trust store.
/// - `tls-require-client-cert` (false): servers refuse clients without a certificate from `tls-ca`.
public struct TLSFiles: Sendable {
    public var certificate: String
    public var key: String
    public var ca: String
    public var requireClientCertificate: Bool

    public static let keys: Set<String> = ["tls-cert", "tls-key", "tls-ca", "tls-require-client-cert"]

    /// For a client: `ca` to trust (empty: the system roots), and a certificate and key to present
    /// when the server asks for one (mutual TLS).
    public init(ca: String = "", certificate: String = "", key: String = "") {
        self.certificate = certificate
        self.key = key
        self.ca = ca
        self.requireClientCertificate = false
    }

    public init(reader: ConfigReader) throws {
        certificate = reader.string("tls-cert", default: "")
        key = reader.string("tls-key", default: "")
        ca = reader.string("tls-ca", default: "")
        requireClientCertificate = try reader.bool("tls-require-client-cert")
        guard certificate.isEmpty == key.isEmpty else { throw ConfigError("tls-cert and tls-key go together") }
        guard !requireClientCertificate || !ca.isEmpty else {
            throw ConfigError("tls-require-client-cert needs tls-ca: the CA client certificates must chain to")
        }
    }

    var hasIdentity: Bool { !certificate.isEmpty }

    /// The lean server's TLS context.
    package func serverContext() throws -> NIOSSLContext {
        guard hasIdentity else { throw ConfigError("listening on TCP needs tls-cert and tls-key") }
        let chain = try NIOSSLCertificate.fromPEMFile(certificate)
        CertificateExpiry.record(chain, use: "rpc")
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem)))
        if requireClientCertificate {
            configuration.certificateVerification = .noHostnameVerification
            configuration.trustRoots = .file(ca)
        }
        return try NIOSSLContext(configuration: configuration)
    }

    /// The lean client's TLS context.
    func clientContext() throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeClientConfiguration()
        if !ca.isEmpty { configuration.trustRoots = .file(ca) }
        if hasIdentity {
            let chain = try NIOSSLCertificate.fromPEMFile(certificate)
            CertificateExpiry.record(chain, use: "rpc-client")
            configuration.certificateChain = chain.map { .certificate($0) }
            configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
        }
        return try NIOSSLContext(configuration: configuration)
    }

    /// The gRPC server's transport security.
    func grpcServerSecurity() throws -> HTTP2ServerTransport.Posix.TransportSecurity {
        guard hasIdentity else { throw ConfigError("listening on TCP needs tls-cert and tls-key") }
        CertificateExpiry.record(file: certificate, use: "rpc")
        let requireClient = requireClientCertificate
        let ca = self.ca
        return .tls(
            certificateChain: [.file(path: certificate, format: .pem)], privateKey: .file(path: key, format: .pem)
        ) { config in
            if requireClient {
                config.clientCertificateVerification = .noHostnameVerification
                config.trustRoots = .certificates([.file(path: ca, format: .pem)])
            }
        }
    }

    /// The gRPC client's transport security.
    func grpcClientSecurity() -> HTTP2ClientTransport.Posix.TransportSecurity {
        let (ca, certificate, key, identity) = (self.ca, self.certificate, self.key, hasIdentity)
        return .tls { config in
            if !ca.isEmpty { config.trustRoots = .certificates([.file(path: ca, format: .pem)]) }
            if identity {
                config.certificateChain = [.file(path: certificate, format: .pem)]
                config.privateKey = .file(path: key, format: .pem)
            }
        }
    }
}
