package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GreetingSpec defines the desired state of Greeting.
type GreetingSpec struct {
	// Message is what the Greeting's ConfigMap says. Defaulted by the
	// webhook to "hello"; at most 64 characters.
	// +optional
	Message string `json:"message,omitempty"`

	// Copies is how many ConfigMaps carry the message. Default 1.
	// +optional
	Copies int32 `json:"copies,omitempty"`
}

// GreetingStatus defines the observed state of Greeting.
type GreetingStatus struct {
	// ConfigMaps is how many ConfigMaps the Greeting owns.
	// +optional
	ConfigMaps int32 `json:"configMaps,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status

// Greeting is the Schema for the greetings API: a message kept in
// ConfigMaps it owns.
type Greeting struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GreetingSpec   `json:"spec,omitempty"`
	Status GreetingStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// GreetingList contains a list of Greeting.
type GreetingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Greeting `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Greeting{}, &GreetingList{})
}
