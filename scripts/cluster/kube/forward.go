package main

// forward relays each connection accepted on the listening socket it inherits as file descriptor 3
// to ADDRESS. The script opens that socket on the host's 127.0.0.1 and starts this program inside
// the cluster's network namespace, so the host reaches the API server through loopback alone and
// nothing in the namespace needs a route to the host.

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func forward(args []string) {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: kube forward HOST:PORT (the listening socket is file descriptor 3)")
		os.Exit(2)
	}
	listener, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube forward: file descriptor 3 is no listening socket: %v\n", err)
		os.Exit(2)
	}
	for {
		client, err := listener.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "kube forward: %v\n", err)
			os.Exit(1)
		}
		go relay(client, args[0])
	}
}

func relay(client net.Conn, address string) {
	defer client.Close()
	server, err := net.DialTimeout("tcp", address, 5*time.Second)
	if err != nil {
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	pipe := func(to, from net.Conn) {
		io.Copy(to, from) //nolint:errcheck // either side closing ends the pair
		if tcp, ok := to.(*net.TCPConn); ok {
			tcp.CloseWrite() //nolint:errcheck
		}
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}
