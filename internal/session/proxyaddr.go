package session

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// proxyHostSuffix ends the URL host that names a sandbox (hex) and a port, so an
// http.Transport can carry a request to a port inside a sandbox (ProxyHost,
// DialProxyAddr).
const proxyHostSuffix = ".sandbox"

// ProxyHost is the "host:port" an http.Transport dials through DialProxyAddr to
// reach port inside sandbox id.
func ProxyHost(id string, port int) string {
	return net.JoinHostPort(hex.EncodeToString([]byte(id))+proxyHostSuffix, strconv.Itoa(port))
}

// DialProxyAddr connects to the sandbox port addr names (see ProxyHost) through
// svc; it is an http.Transport's DialContext.
func DialProxyAddr(ctx context.Context, svc Service, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("proxy address %q: %w", addr, err)
	}
	id, err := hex.DecodeString(strings.TrimSuffix(host, proxyHostSuffix))
	if err != nil {
		return nil, fmt.Errorf("proxy address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("proxy address %q: %w", addr, err)
	}
	return svc.Dial(ctx, string(id), port)
}
