// Command trainer-status-server runs Kubeflow Trainer's own status server package
// (pkg/statusserver) on its own, wired as cmd/trainer-controller-manager wires it when
// the TrainJobStatus feature gate is on: the same configuration defaults and file
// format, the same manager client settings, and statusserver.SetupServer, which builds
// the server's separate client with the status server's QPS and burst (5 and 10 by
// default) and serves the certificate found in the webhook certificate directory.
// Nothing else of the controller runs, so the peer's request path can be measured
// beside ours with no reconciler sharing its process.
//
// Like the controller, it discovers the token issuer from the pod's own service
// account token (/var/run/secrets/kubernetes.io/serviceaccount/token) and reads its
// serving certificate from /tmp/k8s-webhook-server/serving-certs; outside a cluster the
// caller provides both, e.g. by bind mounts in a private mount namespace.
package main

import (
	"flag"
	"os"

	zaplog "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	configapi "github.com/kubeflow/trainer/v2/pkg/apis/config/v1alpha1"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/config"
	"github.com/kubeflow/trainer/v2/pkg/statusserver"
)

func main() {
	var configFile string
	var metricsAddr string
	flag.StringVar(&configFile, "config", "",
		"The Trainer's configuration file (the controller manager's format); its "+
			"statusServer port, qps and burst, tls options and clientConnection apply. "+
			"Omit it for the Trainer's defaults.")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0",
		"Address of the manager's metrics endpoint (controller-runtime's registry, "+
			"client request counts included); \"0\" turns it off.")
	zapOpts := zap.Options{
		TimeEncoder: zapcore.RFC3339NanoTimeEncoder,
		ZapOpts:     []zaplog.Option{zaplog.AddCaller()},
	}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	scheme := apiruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(configapi.AddToScheme(scheme))
	utilruntime.Must(trainer.AddToScheme(scheme))

	options, cfg, err := config.Load(scheme, configFile)
	if err != nil {
		log.Error(err, "Unable to load configuration")
		os.Exit(1)
	}
	// The controller's own endpoints stay off: this process serves status posts only.
	options.Metrics = metricsserver.Options{BindAddress: metricsAddr}
	options.HealthProbeBindAddress = "0"
	options.LeaderElection = false

	restCfg := ctrl.GetConfigOrDie()
	config.ApplyClientConnection(restCfg, &cfg)
	mgr, err := ctrl.NewManager(restCfg, options)
	if err != nil {
		log.Error(err, "Unable to create manager")
		os.Exit(1)
	}
	if err := statusserver.SetupServer(mgr, cfg.StatusServer, cfg.TLS); err != nil {
		log.Error(err, "Could not create runtime status server")
		os.Exit(1)
	}
	log.Info("Starting status server", "port", *cfg.StatusServer.Port,
		"qps", *cfg.StatusServer.QPS, "burst", *cfg.StatusServer.Burst)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}
