// Package webhook serves admission webhooks: the Config of the HTTP handler
// that routes AdmissionReviews to a manager's webhook actors, and the HTTPS
// server that serves it with a reloaded certificate pair.
//
// Programs use it through the root package: a manager's Handler (or
// WebhookHandler, with a Config) is the handler, and
// controllermanager.WebhookServer is this package's Server. A program that
// hosts the handler on a server of its own mounts that handler; this package
// never imports the root package.
//
// The handler: a POST to a webhook's Path() with an AdmissionReview of
// admission.k8s.io/v1 or v1beta1 runs the webhook's Handle in a goroutine
// of the webhook's actor and is answered with a review of the same
// apiVersion. Bad input (an unknown path, another method, a body too large
// or not a review) never reaches Handle; a failing Handle is a denial, and
// counts towards a restart of the webhook by its supervisor. See the root
// package's WebhookHandler for every status, and docs/webhooks.md for the flow.
//
// The server: TLS 1.2 or later, the certificate pair re-read from its files
// when they change (cert-manager and kubelet rotate them in place), the
// probes on the same port, a graceful shutdown. See Server.
package webhook
