// delegate-client sends one hot-plug request to a multus daemon's /delegate endpoint as
// multus-dynamic-networks-controller sends it: the NAD's config given its defaults by the
// NAD client's GetCNIConfigFromSpec, the request built by upstream multus's
// api.CreateDelegateRequest, JSON over HTTP on the daemon's unix socket, and the reply read
// into upstream's api.Response. It prints the reply's result as Go encodes it again.
//
//	delegate-client SOCKET ADD|DEL SANDBOX NETNS IFNAME NAMESPACE POD UID NAD < spec.config
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"

	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	"gopkg.in/k8snetworkplumbingwg/multus-cni.v4/pkg/server/api"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "delegate-client: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 10 {
		fmt.Fprintln(os.Stderr, "usage: delegate-client SOCKET ADD|DEL SANDBOX NETNS IFNAME NAMESPACE POD UID NAD < spec.config")
		os.Exit(2)
	}
	a := os.Args[1:]
	socket, command, sandbox, netns, ifname, namespace, pod, uid, nad := a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]
	spec, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading the NAD's config: %v", err)
	}
	config, err := nadutils.GetCNIConfigFromSpec(string(spec), nad)
	if err != nil {
		fail("the NAD's config: %v", err)
	}
	request := api.CreateDelegateRequest(command, sandbox, netns, ifname, namespace, pod, uid, config,
		&api.DelegateInterfaceAttributes{})
	body, err := json.Marshal(request)
	if err != nil {
		fail("encoding the request: %v", err)
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
	httpRequest, err := http.NewRequestWithContext(context.Background(), http.MethodPost,
		api.GetAPIEndpoint("/delegate"), bytes.NewBuffer(body))
	if err != nil {
		fail("%v", err)
	}
	httpRequest.Header.Set("Content-Type", "application/json")
	reply, err := client.Do(httpRequest)
	if err != nil {
		fail("sending the request: %v", err)
	}
	defer reply.Body.Close()
	text, err := io.ReadAll(reply.Body)
	if err != nil {
		fail("reading the reply: %v", err)
	}
	if reply.StatusCode != http.StatusOK {
		fail("status %d: %s", reply.StatusCode, text)
	}
	response := &api.Response{}
	if len(text) != 0 {
		if err := json.Unmarshal(text, response); err != nil {
			fail("the reply %q is not a response: %v", text, err)
		}
	}
	out, err := json.Marshal(response.Result)
	if err != nil {
		fail("%v", err)
	}
	fmt.Println(string(out))
}
