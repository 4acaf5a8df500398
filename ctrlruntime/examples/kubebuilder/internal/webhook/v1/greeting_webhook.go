// Package v1 holds the webhooks of the demo v1 API.
package v1

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	demov1 "github.com/actorkube/controllermanager/ctrlruntime/examples/kubebuilder/api/v1"
)

var greetinglog = logf.Log.WithName("greeting-resource")

// MaxMessageLength is the longest message the validating webhook admits.
const MaxMessageLength = 64

// SetupGreetingWebhookWithManager registers the webhooks for Greeting in the manager.
func SetupGreetingWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &demov1.Greeting{}).
		WithValidator(&GreetingCustomValidator{}).
		WithDefaulter(&GreetingCustomDefaulter{}).
		Complete()
}

// +kubebuilder:webhook:path=/mutate-demo-example-com-v1-greeting,mutating=true,failurePolicy=fail,sideEffects=None,groups=demo.example.com,resources=greetings,verbs=create;update,versions=v1,name=mgreeting-v1.kb.io,admissionReviewVersions=v1

// GreetingCustomDefaulter sets default values on a Greeting when it is
// created or updated.
type GreetingCustomDefaulter struct{}

// Default sets the message to "hello" and the copies to 1 when unset.
func (d *GreetingCustomDefaulter) Default(_ context.Context, greeting *demov1.Greeting) error {
	greetinglog.Info("Defaulting for Greeting", "name", greeting.GetName())
	if greeting.Spec.Message == "" {
		greeting.Spec.Message = "hello"
	}
	if greeting.Spec.Copies == 0 {
		greeting.Spec.Copies = 1
	}
	return nil
}

// +kubebuilder:webhook:path=/validate-demo-example-com-v1-greeting,mutating=false,failurePolicy=fail,sideEffects=None,groups=demo.example.com,resources=greetings,verbs=create;update,versions=v1,name=vgreeting-v1.kb.io,admissionReviewVersions=v1

// GreetingCustomValidator validates a Greeting when it is created, updated
// or deleted.
type GreetingCustomValidator struct{}

// ValidateCreate refuses a message past MaxMessageLength or negative copies.
func (v *GreetingCustomValidator) ValidateCreate(_ context.Context, greeting *demov1.Greeting) (admission.Warnings, error) {
	return nil, validateGreeting(greeting)
}

// ValidateUpdate applies ValidateCreate's rules to the new object.
func (v *GreetingCustomValidator) ValidateUpdate(_ context.Context, _, greeting *demov1.Greeting) (admission.Warnings, error) {
	return nil, validateGreeting(greeting)
}

// ValidateDelete admits every deletion.
func (v *GreetingCustomValidator) ValidateDelete(context.Context, *demov1.Greeting) (admission.Warnings, error) {
	return nil, nil
}

func validateGreeting(greeting *demov1.Greeting) error {
	var errs field.ErrorList
	if n := len(greeting.Spec.Message); n > MaxMessageLength {
		errs = append(errs, field.TooLong(field.NewPath("spec", "message"), n, MaxMessageLength))
	}
	if greeting.Spec.Copies < 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "copies"), greeting.Spec.Copies, "must not be negative"))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("greeting %q is invalid: %w", greeting.Name, errs.ToAggregate())
}
