// Package egress is toolgate's egress proxy: the only way out of a tool pod
// whose tool names the hosts it may reach (ToolDefinition.egress).
//
// The manager mints a Grant per attempt when it hands the call over the
// runner's channel: the call, its pod (UID and address), the hosts and
// ports the tool declared, and where each credential lives. The grant is
// signed with a key derived from the manager's channel key (keys.GrantKey) and
// reaches the body as its proxy credentials (HTTP_PROXY and HTTPS_PROXY),
// never in the pod spec. The proxy believes a request only when the grant's
// signature holds, the connection comes from the grant's pod address, that
// pod still exists with that UID and is not being deleted, and the grant
// has not expired; then it serves hosts the grant names and refuses the
// rest. A name is resolved by the proxy, and an answer in a range that is
// not public is refused unless the operator allows that range.
//
// Hosts without a credential are tunnelled (CONNECT). A host with a
// credential is never tunnelled: the body sends its request in absolute
// form (http://host/path), and the proxy opens TLS to the host, verifies
// it, and sets the header from the Secret, which only the proxy reads. The
// pod never holds the credential, and it goes to that host only.
package egress
