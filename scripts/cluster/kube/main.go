// One multi-call binary for the node's Kubernetes programs, built from the upstream Go modules at
// the versions go.mod pins: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
// kube-proxy, kubectl and kubeadm (for its certificate and kubeconfig phases) share one link and one
// cache entry. The program is chosen by the first argument (`kube kubelet --config ...`) or by the
// name it is called by (a link named kubectl). `kube forward ADDRESS` is the one program of ours:
// see forward.go.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as the upstream kube-apiserver and controller-manager

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubeadm "k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var programs = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy":              proxy.NewProxyCommand,
}

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if name == "kube" {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, "usage: kube etcd|kube-apiserver|kubeadm|forward|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl [ARGS]")
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	os.Args = append([]string{name}, args...)
	switch name {
	case "etcd":
		etcdmain.Main(os.Args)
	case "kubeadm":
		kubeadmerrors.HandleError(kubeadm.Run())
	case "forward":
		forward(args)
	case "kubectl":
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	default:
		program, ok := programs[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "kube: no program %q\n", name)
			os.Exit(2)
		}
		command := program()
		command.SetArgs(args)
		os.Exit(cli.Run(command))
	}
}
